"""The metrics server of `glidemq-run` against bad clients: idle, slow, garbage and many.

None of them may hold up the supervisor's loop, so `/health` keeps answering promptly. The
bound asserted (1 s per answer) is loose on purpose: the machine is shared; the defect it
catches took 0.5 s per silent connection, seconds in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from glidemq import Queue

from .conftest import APP, CLIProcess, Launcher, free_port

ANSWER_WITHIN = 1.0


def _health(port: int) -> tuple[float, bytes]:
    """GET /health on a fresh connection: (seconds taken, the full response)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return time.monotonic() - started, b"".join(chunks)


async def _poll_health(port: int, times: int, pause: float = 0.1) -> list[float]:
    took = []
    for _ in range(times):
        elapsed, response = await asyncio.to_thread(_health, port)
        assert response.startswith(b"HTTP/1.1 200 OK"), response[:200]
        assert response.endswith(b"ok\n"), response[-200:]
        took.append(elapsed)
        await asyncio.sleep(pause)
    return took


@contextlib.contextmanager
def _connections(port: int, n: int) -> Iterator[list[socket.socket]]:
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


async def _started(run_cli: Launcher, queue: Queue[Any, Any], url: str) -> tuple[CLIProcess, int]:
    port = free_port()
    cli = run_cli(
        f"{APP}:record",
        *("--queue", queue.name, "--url", url, "--procs", 1, "--metrics-port", port),
    )
    await cli.wait_workers(1)
    return cli, port


@pytest.mark.parametrize("clients", [20, 300], ids=["20-idle", "300-idle-over-the-cap"])
async def test_idle_connections_do_not_delay_health(
    clients: int, run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    cli, port = await _started(run_cli, cli_queue, valkey_server.url)
    with _connections(port, clients):
        took = await _poll_health(port, 10)
    print(f"/health with {clients} idle connections open: slowest {max(took):.4f} s")
    assert max(took) < ANSWER_WITHIN, took
    assert cli.popen.poll() is None


async def test_200_concurrent_health_requests_are_all_answered(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    cli, port = await _started(run_cli, cli_queue, valkey_server.url)

    async def one() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 30)
        finally:
            writer.close()

    with _connections(port, 50):  # idle ones in the way as well
        answers = await asyncio.gather(*(one() for _ in range(200)))
        took = await _poll_health(port, 5)
    bad = [
        a[:40] for a in answers if not (a.startswith(b"HTTP/1.1 200 OK") and a.endswith(b"ok\n"))
    ]
    assert not bad, f"{len(bad)} of 200 not answered: {sorted(set(bad))}"
    assert max(took) < ANSWER_WITHIN, took
    assert cli.popen.poll() is None


async def test_slow_and_garbage_clients_do_not_delay_health(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    cli, port = await _started(run_cli, cli_queue, valkey_server.url)
    stop = asyncio.Event()

    def slow_client() -> None:
        # one byte a second of a request that never ends
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as s:
            for byte in b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 60:
                if stop.is_set():
                    return
                s.sendall(bytes([byte]))
                time.sleep(1.0)

    def garbage_client() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(bytes(range(256)) * 4 + b"\r\n\r\n")
            chunks = []
            with contextlib.suppress(OSError):
                while chunk := s.recv(4096):
                    chunks.append(chunk)
            return b"".join(chunks)

    slow = [asyncio.create_task(asyncio.to_thread(slow_client)) for _ in range(5)]
    await asyncio.sleep(1.5)
    garbage = await asyncio.to_thread(garbage_client)
    assert garbage == b"" or garbage.startswith(b"HTTP/1.1 400"), garbage[:200]
    took = await _poll_health(port, 15, pause=0.2)
    assert max(took) < ANSWER_WITHIN, took
    stop.set()
    await asyncio.gather(*slow)
    assert cli.popen.poll() is None


async def test_a_silent_connection_is_closed_by_the_server(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    _, port = await _started(run_cli, cli_queue, valkey_server.url)

    def closed_after() -> float:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /hea")  # and then nothing more
            while s.recv(4096):
                pass
        return time.monotonic() - started

    assert await asyncio.to_thread(closed_after) < 15
