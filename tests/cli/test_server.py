"""`glidemq-server` (and `python -m glidemq.server`): the real command in a subprocess, on free
ports (never 6379), stopped by signals as a user would stop it."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from glidemq import Job, Queue, Worker
from glidemq.server.valkey import port_is_free
from tests.helpers import wait_for

from .conftest import APP, REPO_ROOT, Launcher, cli_env

SCRIPT = REPO_ROOT / ".venv" / "bin" / "glidemq-server"
_URL = re.compile(r"^URL: (valkey://\S+)$", re.M)


def free_ports(n: int, bus: bool = False) -> int:
    """The first of `n` consecutive ports free on 127.0.0.1 (and their +10000 bus ports)."""
    for _ in range(500):
        base = random.randrange(20000, 30000)
        ports = range(base, base + n)
        if all(port_is_free("127.0.0.1", p) for p in ports) and (
            not bus or all(port_is_free("127.0.0.1", p + 10000) for p in ports)
        ):
            return base
    raise AssertionError("no free port range found")


def _exists(path: str) -> bool:
    return os.path.exists(path)


class Server:
    """One `glidemq-server` process with its output in files."""

    def __init__(self, argv: list[str], workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = workdir / "stdout.log", workdir / "stderr.log"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(
                argv, cwd=REPO_ROOT, env=cli_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )
        self.process = psutil.Process(self.popen.pid)
        self.seen: dict[int, psutil.Process] = {}

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while not (m := _URL.search(self.stdout())):
            self.valkeys()
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"no URL line (exit {self.popen.poll()}):\n{self.stdout()}\n{self.stderr()}"
                )
            time.sleep(0.05)
        self.valkeys()
        return m.group(1)

    def valkeys(self) -> list[psutil.Process]:
        """The running valkey-server children (remembered for the cleanup)."""
        found = []
        try:
            children = self.process.children()
        except psutil.NoSuchProcess:
            return []
        for c in children:
            with contextlib.suppress(psutil.NoSuchProcess):  # valkey-cli comes and goes
                if c.name() == "valkey-server" and c.status() != psutil.STATUS_ZOMBIE:
                    self.seen.setdefault(c.pid, c)
                    found.append(c)
        return found

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.stdout()}") from None

    def cleanup(self) -> None:
        self.valkeys()
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        for proc in self.seen.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start `glidemq-server ARGS` (the console script, or `python -m glidemq.server`)."""
    started: list[Server] = []

    def start(*args: str | int, module: bool = False) -> Server:
        if not module and not SCRIPT.exists():
            pytest.skip(f"no installed console script at {SCRIPT}")
        head = [sys.executable, "-m", "glidemq.server"] if module else [str(SCRIPT)]
        server = Server(head + [str(a) for a in args], tmp_path / f"server{len(started)}")
        started.append(server)
        return server

    yield start
    for server in started:
        server.cleanup()
        print(f"--- exit {server.popen.returncode}\n{server.stdout()}\n{server.stderr()}")


async def _round_trip(url: str, queue_name: str) -> Any:
    async def double(job: Job[int, int]) -> int:
        return job.data * 2

    async with Queue(queue_name, connection=url) as queue:
        job = await queue.add("double", 21)
        assert job is not None
        async with Worker(queue_name, double, connection=url):
            await job.wait_until_finished(timeout=30)
        return job.returnvalue


async def test_server_serves_jobs_and_sigterm_stops_it_cleanly(serve: Any, queue_name: str) -> None:
    port = free_ports(1)
    server = serve("--port", port)
    url = server.wait_url(30)
    assert url == f"valkey://127.0.0.1:{port}"
    (valkey,) = server.valkeys()
    data_dir = re.search(r"data: (\S+)", server.stdout()).group(1)  # type: ignore[union-attr]
    assert _exists(data_dir)
    assert await _round_trip(url, queue_name) == 42
    server.popen.send_signal(signal.SIGTERM)
    assert server.wait_exit(20) == 0
    assert not valkey.is_running()
    assert not _exists(data_dir)  # the temporary data dir went with it
    assert port_is_free("127.0.0.1", port)


async def test_python_m_glidemq_server_runs_in_the_foreground_until_ctrl_c(
    serve: Any, queue_name: str
) -> None:
    port = free_ports(1)
    server = serve("--port", port, module=True)
    url = server.wait_url(30)
    assert await _round_trip(url, queue_name) == 42
    (valkey,) = server.valkeys()
    server.popen.send_signal(signal.SIGINT)
    assert server.wait_exit(20) == 0
    assert not valkey.is_running()
    assert "SIGINT, stopping" in server.stdout()


def test_a_port_in_use_is_one_clear_line_and_exit_2(serve: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = serve("--port", port)
        assert server.wait_exit(30) == 2
    err = server.stderr().strip()
    assert err == (
        f"glidemq-server: error: port {port} on 127.0.0.1 is already in use "
        "(another Valkey running?); pick another with --port"
    )
    assert server.valkeys() == []


def test_appendonly_needs_a_dir(serve: Any) -> None:
    server = serve("--port", free_ports(1), "--appendonly")
    assert server.wait_exit(30) == 2
    assert server.stderr().strip().splitlines() == [
        "glidemq-server: error: --appendonly needs --dir (data in a temporary dir is removed "
        "on exit)"
    ]


async def test_dir_and_appendonly_keep_the_data_across_restarts(
    serve: Any, tmp_path: Path, queue_name: str
) -> None:
    port = free_ports(1)
    data = tmp_path / "data"
    first = serve("--port", port, "--dir", data, "--appendonly")
    url = first.wait_url(30)
    async with Queue(queue_name, connection=url) as queue:
        job = await queue.add("kept", {"n": 1})
        assert job is not None
    first.popen.send_signal(signal.SIGTERM)
    assert first.wait_exit(20) == 0
    assert list(data.glob("appendonlydir/*.aof"))  # the append-only file stayed
    second = serve("--port", port, "--dir", data, "--appendonly")
    async with Queue(queue_name, connection=second.wait_url(30)) as queue:
        again = await queue.get_job(job.id)
        assert again is not None and again.data == {"n": 1}
    second.popen.send_signal(signal.SIGTERM)
    assert second.wait_exit(20) == 0


@pytest.mark.slow
async def test_cluster_prints_every_node_and_stops_all_of_them(serve: Any, queue_name: str) -> None:
    base = free_ports(6, bus=True)
    server = serve("--cluster", "--port", base)
    url = server.wait_url(120)
    ports = list(range(base, base + 6))
    assert url == "valkey://" + ",".join(f"127.0.0.1:{p}" for p in ports)
    out = server.stdout()
    assert len(re.findall(r"^  node 127\.0\.0\.1:\d+  primary, slots ", out, re.M)) == 3
    assert (
        len(re.findall(r"^  node 127\.0\.0\.1:\d+  replica of 127\.0\.0\.1:\d+$", out, re.M)) == 3
    )
    for p in ports:
        assert f"node 127.0.0.1:{p} " in out
    nodes = server.valkeys()
    assert len(nodes) == 6
    assert await _round_trip(url, queue_name) == 42
    server.popen.send_signal(signal.SIGTERM)
    assert server.wait_exit(30) == 0
    await wait_for(lambda: not any(n.is_running() for n in nodes), timeout=10)


async def test_run_embedded_port_starts_the_embedded_server_on_that_port(
    run_cli: Launcher, queue_name: str
) -> None:
    port = free_ports(1)
    cli = run_cli(
        f"{APP}:record", "--queue", queue_name, "--procs", 1, "--embedded", "--embedded-port", port
    )
    (url,) = await cli.wait_log(r"glidemq-run: embedded Valkey at (valkey://\S+)")
    assert url == f"valkey://127.0.0.1:{port}"
    await cli.wait_workers(1)
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(20) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--embedded-port", "{port}"], "glidemq-run: error: --embedded-port needs --embedded"),
        (
            ["--embedded", "--embedded-port", "{taken}"],
            "glidemq-run: error: --embedded-port {taken}: the port is already in use",
        ),
    ],
    ids=["without-embedded", "port-taken"],
)
async def test_run_embedded_port_errors(
    run_cli: Launcher, queue_name: str, args: list[str], message: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        values = {"port": str(free_ports(1)), "taken": str(taken.getsockname()[1])}
        cli = run_cli(f"{APP}:record", "--queue", queue_name, *(a.format(**values) for a in args))
        assert await cli.wait_exit(30) == 2
    assert cli.stderr().strip() == message.format(**values)
