"""Processes: nothing is left behind after close or after the worker is SIGKILLed, and a
storm of child crashes loses no job."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import orjson
import psutil
import pytest

from glidemq import ConnectionOptions, Queue
from glidemq.sandbox import SandboxOptions
from tests.helpers import wait_for

from .conftest import sandboxed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for whoever adopted it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _python(p: psutil.Process) -> bool:
    try:
        return p.name().startswith("python")
    except psutil.Error:
        return False


def _our_zombies() -> list[int]:
    """Python zombies under this process: sandbox children are Python processes (a JVM or a
    server another test started exits on its own schedule)."""
    return [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if _gone(p.pid) and psutil.pid_exists(p.pid) and _python(p)
    ]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
async def test_close_leaves_no_process_and_no_zombie(
    start_method: Any, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    # Zombies an earlier test of this process left (a server it killed, say) are not ours.
    earlier = set(_our_zombies())
    await queue.add_bulk([("e", i) for i in range(30)])
    options = SandboxOptions(start_method=start_method)
    worker = sandboxed(queue, "echo", conn, concurrency=3, sandbox=options)
    await worker.start()
    await wait_for(lambda: worker.completed_count == 30, timeout=30)
    pool = worker.sandbox_pool
    assert pool is not None
    pids = pool.pids + ([pool.forkserver_pid] if pool.forkserver_pid else [])
    assert len(pids) == (4 if start_method == "forkserver" else 3)
    await worker.close()
    for pid in pids:
        assert not psutil.pid_exists(pid), f"pid {pid} is still there (or a zombie)"
    assert sorted(set(_our_zombies()) - earlier) == []


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
async def test_children_exit_when_the_worker_is_killed(
    start_method: str, queue: Queue[Any, Any], valkey_server: Any
) -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fixtures.sandbox_parent",
        valkey_server.url,
        queue.name,
        start_method,
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(parent.stdout.readline(), 30)
        report = orjson.loads(line)
        pids = report["children"] + ([report["forkserver"]] if report["forkserver"] else [])
        assert len(report["children"]) == 3
        for pid in pids:
            proc = psutil.Process(pid)
            assert proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        parent.send_signal(signal.SIGKILL)
        await parent.wait()
        started = time.monotonic()
        await wait_for(lambda: all(_gone(p) for p in pids), timeout=5)
        assert time.monotonic() - started < 5
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()


async def test_random_crashes_lose_no_job(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    rng = random.Random(20240611)
    crash: dict[int, str] = {}
    for n in range(2000):
        roll = rng.random()
        if roll < 0.015:
            crash[n] = "exit"
        elif roll < 0.03:
            crash[n] = "kill"
    added = await queue.add_bulk([("c", {"n": n, "crash": crash.get(n)}) for n in range(2000)])
    ids = {a.id: n for a, n in zip(added, range(2000), strict=True) if a is not None}
    assert len(ids) == 2000
    async with sandboxed(queue, "maybe_crash", conn, concurrency=8) as worker:
        await wait_for(lambda: worker.completed_count + worker.failed_count >= 2000, timeout=60)
        pool = worker.sandbox_pool
        assert pool is not None and pool.counters["crashed"] == len(crash)
    counts = await queue.get_job_counts()
    assert counts.active == 0 and counts.waiting == 0 and counts.delayed == 0
    assert counts.completed + counts.failed == 2000 and counts.failed == len(crash)
    failed = await queue.get_jobs(["failed"], 0, -1)
    assert {ids[j.id] for j in failed} == set(crash)  # no job was hurt by another's crash
    for job in failed:
        expected = "code 13" if crash[ids[job.id]] == "exit" else "SIGKILL"
        assert expected in (job.failed_reason or ""), job.failed_reason
    completed = await queue.get_jobs(["completed"], 0, -1)
    assert all(j.returnvalue == ids[j.id] for j in completed)


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
async def test_processes_are_started_off_the_event_loop(
    start_method: str, queue: Queue[Any, Any], conn: ConnectionOptions, monkeypatch: Any
) -> None:
    # fork+exec blocks its caller until the exec: not the loop that runs every job. The
    # real Popen starts the real processes; the wrapper only notes the thread it ran on.
    import threading

    from glidemq.sandbox import launcher

    real = launcher.subprocess.Popen
    threads: list[int] = []

    def noting(argv: Any, *args: Any, **kwargs: Any) -> Any:
        if any("glidemq.sandbox" in str(a) for a in argv):
            threads.append(threading.get_ident())
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(launcher.subprocess, "Popen", noting)
    await queue.add_bulk([("e", i) for i in range(6)])
    worker = sandboxed(
        queue, "echo", conn, concurrency=2, sandbox=SandboxOptions(start_method=start_method)
    )
    await worker.start()
    try:
        await wait_for(lambda: worker.completed_count == 6, timeout=30)
    finally:
        await worker.close()
    assert threads, "no sandbox process was started"
    assert threading.get_ident() not in threads
    assert len(set(threads)) == 1  # one long-lived thread: PR_SET_PDEATHSIG follows it
