"""Helpers for the glidemq-run tests: launch the real CLI as a subprocess and clean up after it.

Each launch gets its own stderr/stdout files (printed at teardown, so pytest shows them when a
test fails). Teardown SIGKILLs the supervisor and every worker process ever seen under it,
including stopped ones, so no test leaves processes behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import valkey

from glidemq import Queue

REPO_ROOT = Path(__file__).resolve().parents[2]
APP = "tests.fixtures.runtime_app"
CLI_MODULE = [sys.executable, "-m", "glidemq.runtime.cli"]
CLI_SCRIPT = REPO_ROOT / ".venv" / "bin" / "glidemq-run"

_READY = re.compile(r"pid (\d+) ready on")


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without glidemq-run settings (GLIDEMQ_* except the test suite's own
    GLIDEMQ_VALKEY_* / GLIDEMQ_TEST_*), with the repo root importable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GLIDEMQ_") or k.startswith(("GLIDEMQ_VALKEY_", "GLIDEMQ_TEST_"))
    }
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{path}" if path else str(REPO_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CLIProcess:
    """One running `glidemq-run` (the supervisor) and what the test saw of its workers."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], workdir: Path) -> None:
        self.argv = list(argv)
        workdir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = workdir / "stderr.log"
        self.stdout_path = workdir / "stdout.log"
        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=REPO_ROOT,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.pid = self.popen.pid
        self.started = time.monotonic()
        self.process = psutil.Process(self.pid)
        # every worker process ever seen, so teardown can kill stragglers (stopped ones too)
        self.seen: dict[int, psutil.Process] = {}

    # -- output ---------------------------------------------------------------------------

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def ready_pids(self) -> set[int]:
        """Worker pids that reported ready (text log format)."""
        return {int(m) for m in _READY.findall(self.stderr())}

    async def wait_log(self, pattern: str, timeout: float = 15.0, count: int = 1) -> list[str]:
        """Wait until `pattern` (a regex) matched `count` times in stderr; the matches."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            found = rx.findall(self.stderr())
            if len(found) >= count:
                return found
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"{pattern!r} seen {len(found)}/{count} times "
                    f"(exit code {self.popen.poll()}) in:\n{self.stderr()[-4000:]}"
                )
            await asyncio.sleep(0.05)

    # -- processes ------------------------------------------------------------------------

    def workers(self) -> list[psutil.Process]:
        """Live worker processes: the supervisor's children, minus zombies and an embedded
        valkey-server."""
        out = []
        try:
            children = self.process.children()
        except psutil.NoSuchProcess:
            return []
        for child in children:
            try:
                if child.status() == psutil.STATUS_ZOMBIE or "valkey" in child.name():
                    continue
            except psutil.NoSuchProcess:
                continue
            self.seen.setdefault(child.pid, child)
            out.append(child)
        return out

    def worker_pids(self) -> set[int]:
        return {p.pid for p in self.workers()}

    async def wait_workers(
        self, n: int, timeout: float = 20.0, exclude: set[int] | frozenset[int] = frozenset()
    ) -> set[int]:
        """Wait until exactly `n` worker processes are alive, all reported ready and none of
        them is in `exclude`; their pids."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.worker_pids()
            if len(pids) == n and pids <= self.ready_pids() and not pids & exclude:
                return pids
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"wanted {n} ready workers (not {sorted(exclude)}), have {sorted(pids)} "
                    f"(exit code {self.popen.poll()}); log:\n{self.stderr()[-4000:]}"
                )
            await asyncio.sleep(0.05)

    def send(self, sig: int) -> None:
        os.kill(self.pid, sig)

    async def wait_exit(self, timeout: float) -> int:
        """The supervisor's exit code; fails the test if it is still running after `timeout`."""
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"glidemq-run still running after {timeout} s; log:\n{self.stderr()[-4000:]}"
                )
            await asyncio.sleep(0.05)
        return int(self.popen.returncode)

    def cleanup(self) -> None:
        """SIGKILL the supervisor and every worker it ever had; reap the supervisor."""
        with contextlib.suppress(psutil.Error):
            self.workers()
            for child in self.process.children(recursive=True):
                self.seen.setdefault(child.pid, child)
        if self.popen.poll() is None:
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        for proc in self.seen.values():
            # psutil checks the creation time, so a reused pid is never hit
            with contextlib.suppress(psutil.Error):
                proc.kill()
                proc.wait(timeout=5)


Launcher = Callable[..., CLIProcess]


@pytest.fixture
def run_cli(tmp_path: Path) -> Iterator[Launcher]:
    """Start `glidemq-run ARGS...` (as `python -m glidemq.runtime.cli`, or the installed
    console script with `script=True`) in the repo root; extra environment with `env=`."""
    launched: list[CLIProcess] = []

    def launch(
        *args: str | int, env: Mapping[str, str] | None = None, script: bool = False
    ) -> CLIProcess:
        if script and not CLI_SCRIPT.exists():
            pytest.skip(f"no installed console script at {CLI_SCRIPT}")
        argv = ([str(CLI_SCRIPT)] if script else CLI_MODULE) + [str(a) for a in args]
        proc = CLIProcess(argv, cli_env(env), tmp_path / f"run{len(launched)}")
        launched.append(proc)
        return proc

    yield launch
    for proc in launched:
        proc.cleanup()
        print(f"--- {' '.join(proc.argv)} (exit {proc.popen.returncode}) stderr:")
        print(proc.stderr()[-20000:])


@pytest.fixture
async def cli_queue(valkey_server: Any, queue_name: str) -> AsyncIterator[Queue[Any, Any]]:
    """A Queue on the session server with a unique name, obliterated afterwards."""
    q: Queue[Any, Any] = Queue(queue_name, connection=valkey_server.url)
    await q._context()
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()


@pytest.fixture
def raw(valkey_server: Any) -> Iterator[valkey.Valkey]:
    """A plain valkey-py client on the session server, for pipelined checks."""
    client = valkey.Valkey(host=valkey_server.host, port=valkey_server.port)
    yield client
    client.close()


def executions(raw: valkey.Valkey, queue: Queue[Any, Any], ids: Sequence[str]) -> dict[str, int]:
    """How many times each job ran: the length of its log (every fixture processor logs one
    `run pid=...` line per execution)."""
    counts: dict[str, int] = {}
    for start in range(0, len(ids), 5000):
        chunk = list(ids[start : start + 5000])
        pipe = raw.pipeline(transaction=False)
        for job_id in chunk:
            pipe.llen(queue.keys.log(job_id))
        counts.update(zip(chunk, (int(n) for n in pipe.execute()), strict=True))
    return counts


def run_pids(
    raw: valkey.Valkey, queue: Queue[Any, Any], ids: Sequence[str]
) -> dict[str, list[int]]:
    """For each job, the pids of the processes that started it, in order."""
    pipe = raw.pipeline(transaction=False)
    for job_id in ids:
        pipe.lrange(queue.keys.log(job_id), 0, -1)
    out: dict[str, list[int]] = {}
    for job_id, lines in zip(ids, pipe.execute(), strict=True):
        out[job_id] = [int(m) for line in lines for m in re.findall(rb"run pid=(\d+)", line)]
    return out


def pending_entries(raw: valkey.Valkey, queue: Queue[Any, Any]) -> int:
    """Entries in the PEL of the queue's consumer group (XPENDING count)."""
    info: Any = raw.xpending(queue.keys.stream, "workers")
    return int(info["pending"])
