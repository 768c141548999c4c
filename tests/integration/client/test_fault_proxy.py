"""The TCP fault proxy against a real Valkey: each fault does what it says, it is switchable at
runtime (methods and control port), and a Worker behind it survives latency, resets and a
black-hole period and completes every job."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.chaos.proxy import FaultProxy
from tests.helpers import FAST, wait_for

PING = b"*1\r\n$4\r\nPING\r\n"


@pytest.fixture
def proxy(valkey_server: Any) -> Iterator[FaultProxy]:
    with FaultProxy((valkey_server.host, valkey_server.port)) as p:
        yield p


def ping(sock: socket.socket) -> bytes:
    sock.sendall(PING)
    return sock.recv(64)


def connect(proxy: FaultProxy, timeout: float = 2.0) -> socket.socket:
    return socket.create_connection((proxy.host, proxy.port), timeout=timeout)


# =========================================================================== faults


def test_forwards_and_adds_latency(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert ping(sock) == b"+PONG\r\n"
        proxy.set_latency(100)
        started = time.monotonic()
        assert ping(sock) == b"+PONG\r\n"
        # 100 ms on the way in and 100 ms on the way out
        assert time.monotonic() - started >= 0.19
        proxy.heal()
        started = time.monotonic()
        assert ping(sock) == b"+PONG\r\n"
        assert time.monotonic() - started < 0.15
    status = proxy.status()
    assert status["connections"] == 1 and status["bytes_up"] == 3 * len(PING)


def test_stall_holds_traffic_until_heal_without_losing_it(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        proxy.stall()
        assert proxy.mode == "stalled"
        sock.sendall(PING)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(64)
        proxy.heal()
        sock.settimeout(2.0)
        assert sock.recv(64) == b"+PONG\r\n"  # the held request went through after all


def test_reset_aborts_open_connections_with_rst(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert ping(sock) == b"+PONG\r\n"
        assert proxy.reset() == 1
        with pytest.raises(ConnectionResetError):
            for _ in range(3):  # the first send may still be buffered locally
                ping(sock)
                time.sleep(0.05)
    with connect(proxy) as sock:  # new connections are fine
        assert ping(sock) == b"+PONG\r\n"
    assert proxy.status()["resets"] == 1


def test_blackhole_swallows_and_heal_restores_only_new_connections(proxy: FaultProxy) -> None:
    with connect(proxy) as old:
        assert ping(old) == b"+PONG\r\n"
        proxy.blackhole()
        with connect(proxy, timeout=0.5) as new:  # accepted ...
            new.sendall(PING)
            with pytest.raises(TimeoutError):  # ... but never answered
                new.recv(64)
        old.settimeout(0.5)
        old.sendall(PING)
        with pytest.raises(TimeoutError):
            old.recv(64)
        proxy.heal()
        with connect(proxy) as fresh:
            assert ping(fresh) == b"+PONG\r\n"
        old.sendall(PING)
        with pytest.raises(TimeoutError):  # a swallowed connection stays dead
            old.recv(64)
    assert proxy.status()["swallowed"] >= 3 * len(PING)


def test_upstream_down_refuses_connections() -> None:
    # a bound socket that does not listen: connections to it are refused, and no one else
    # can take the port while the test runs
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        upstream = dead.getsockname()
        with (
            FaultProxy(upstream) as proxy,
            # reset as soon as it is accepted, or on the first write: the same to a client
            pytest.raises((ConnectionResetError, BrokenPipeError)),
            connect(proxy) as sock,
        ):
            sock.sendall(PING)
            if sock.recv(64) == b"":  # closed instead of reset: the same to a client
                raise ConnectionResetError("closed")


def test_control_port_switches_faults(proxy: FaultProxy) -> None:
    port = proxy.serve_control()
    with socket.create_connection((proxy.host, port), timeout=2) as ctl:
        stream = ctl.makefile("rwb")

        def send(line: str) -> dict[str, Any]:
            stream.write(line.encode() + b"\n")
            stream.flush()
            return dict(json.loads(stream.readline()))

        assert send("latency 25 5")["latency_ms"] == 25
        assert send("stall")["mode"] == "stalled"
        assert send("blackhole")["mode"] == "blackhole"
        assert send("heal") == {**send("status"), "mode": "ok", "latency_ms": 0}
        assert send("reset")["reset"] == 0
        assert "error" in send("latency -1")
        assert "error" in send("explode")


def test_methods_need_a_started_proxy(valkey_server: Any) -> None:
    proxy = FaultProxy(f"{valkey_server.host}:{valkey_server.port}")
    with pytest.raises(RuntimeError, match="start"):
        proxy.stall()
    with pytest.raises(ValueError):
        proxy.start().set_latency(-5)
    proxy.close()
    proxy.close()  # idempotent


# =========================================================================== a worker behind it


async def test_worker_through_proxy_survives_latency_resets_and_a_black_hole(
    valkey_server: Any, queue_name: str
) -> None:
    total = 300
    seen: set[int] = set()

    async def record(job: Job[Any, Any]) -> int:
        seen.add(job.data)
        return int(job.data)

    direct = ConnectionOptions.from_url(valkey_server.url)
    async with FaultProxy((valkey_server.host, valkey_server.port)) as proxy:
        through = ConnectionOptions.from_url(proxy.url, request_timeout_ms=500)
        async with (
            Queue(queue_name, connection=direct) as queue,
            Worker(
                queue_name,
                record,
                connection=through,
                concurrency=8,
                lock_duration=1500,
                stalled_interval=500,
                max_stalled_count=100,
                **FAST,
            ) as worker,
        ):
            batches = iter(range(0, total, 50))

            async def add_batch() -> None:
                start = next(batches)
                await queue.add_bulk([("n", i) for i in range(start, start + 50)])

            await add_batch()
            proxy.set_latency(20, 10)
            await add_batch()
            await wait_for(lambda: len(seen) >= 100, timeout=20)
            proxy.heal()

            for _ in range(3):  # resets mid-run: valkey-glide reconnects on its own
                await add_batch()
                await asyncio.sleep(0.1)
                await asyncio.to_thread(proxy.reset)
            await wait_for(lambda: len(seen) >= 250, timeout=20)

            await asyncio.to_thread(proxy.blackhole)
            await add_batch()
            await asyncio.sleep(worker.watchdog.bound + 0.5)
            await asyncio.to_thread(proxy.heal)
            healed = time.monotonic()

            # The black-holed connections never come back: the watchdog replaces them.
            # A job whose completion reply was black-holed is handed back and runs again,
            # so every job having run once is not the end: wait for the recorded outcome.
            async def all_completed() -> bool:
                counts = await queue.get_job_counts()
                return counts.completed == total

            await wait_for(all_completed, timeout=worker.watchdog.bound * 2 + 10)
            assert worker.watchdog.renewals >= 1
            assert time.monotonic() - healed < worker.watchdog.bound * 2 + 10
            counts = await queue.get_job_counts()
            assert counts.completed == total and counts.active == 0 and counts.waiting == 0
            await queue.obliterate(force=True)
    assert seen == set(range(total))
