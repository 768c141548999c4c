"""Held jobs: a Worker takes a few jobs beyond its concurrency while short jobs run, starts
each one as a slot frees, and gives them back on close, pause, or when long runs fill every
slot. A worker killed while it holds jobs loses none of them (glidemq/worker/hold.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, ValidationError, Worker
from tests.helpers import FAST, wait_for, wait_state

ROOT = Path(__file__).resolve().parents[3]
HOLD_WORKER = ROOT / "tests" / "fixtures" / "hold_worker.py"
UVLOOP_WORKER = ROOT / "tests" / "fixtures" / "uvloop_worker.py"


def _spawn_hold_worker(url: str, queue_name: str, ledger: Path, out: Any) -> Any:
    return subprocess.Popen(
        [sys.executable, str(HOLD_WORKER), url, queue_name, str(ledger)],
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


async def _held_and_running(queue: Queue[Any, Any]) -> tuple[int, int]:
    counts = await queue.get_job_counts()
    return counts.active, counts.waiting


async def test_concurrency_still_caps_the_jobs_that_run_at_once(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    running = peak = 0
    held_seen = 0

    async with Queue(queue_name, connection=standalone_conn) as queue:
        await queue.add_bulk([{"name": "j", "data": {"i": i}} for i in range(300)])
        worker: Worker[Any, Any]

        async def work(job: Job[Any, Any]) -> int:
            nonlocal running, peak, held_seen
            running += 1
            peak = max(peak, running)
            held_seen = max(held_seen, worker.active_count - running)
            await asyncio.sleep(0.001)
            running -= 1
            return int(job.data["i"])

        worker = Worker(queue_name, work, connection=standalone_conn, concurrency=2, **FAST)
        async with worker:

            async def all_done() -> bool:
                return (await queue.get_job_counts()).completed == 300

            await wait_for(all_done, timeout=30)
        assert peak <= 2, f"{peak} jobs ran at once with concurrency 2"
        assert held_seen >= 1, "the worker never held a job beyond its concurrency"
        assert worker.completed_count == 300
        await queue.obliterate(force=True)


async def test_without_a_hold_window_the_worker_holds_nothing(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    most = 0
    async with Queue(queue_name, connection=standalone_conn) as queue:
        await queue.add_bulk([{"name": "j", "data": {}} for _ in range(100)])
        worker: Worker[Any, Any]

        async def work(job: Job[Any, Any]) -> None:
            nonlocal most
            most = max(most, worker.active_count)
            await asyncio.sleep(0.001)

        worker = Worker(
            queue_name, work, connection=standalone_conn, concurrency=1, hold_window=0, **FAST
        )
        async with worker:

            async def all_done() -> bool:
                return (await queue.get_job_counts()).completed == 100

            await wait_for(all_done, timeout=30)
        assert most == 1
        await queue.obliterate(force=True)


def test_every_job_completes_on_uvloop(standalone_conn: ConnectionOptions, queue_name: str) -> None:
    """glidemq-run's workers run on uvloop, whose clock moves in whole milliseconds (run in a
    process of its own, as there)."""
    pytest.importorskip("uvloop", reason="uvloop is not installed")
    done = subprocess.run(
        [sys.executable, str(UVLOOP_WORKER), standalone_conn.url, queue_name, "5000", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    completed, failed, loop = done.stdout.split()
    assert loop.startswith("uvloop")
    assert (int(completed), int(failed)) == (5000, 0)


def test_hold_options_are_checked() -> None:
    with pytest.raises(ValidationError, match="hold_window"):
        Worker("q", lambda job: None, hold_window=-1)
    with pytest.raises(ValidationError, match="max_held"):
        Worker("q", lambda job: None, max_held=1.5)  # type: ignore[arg-type]


async def _one_long_then_short(
    queue: Queue[Any, Any], conn: ConnectionOptions, **opts: Any
) -> tuple[Worker[Any, Any], asyncio.Event, list[str]]:
    """A worker at concurrency 1 that ran short jobs (so it holds jobs: none are held before
    a run was timed), then took a job that blocks until released, and holds the next one."""
    release = asyncio.Event()
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> str:
        if job.name != "warm":
            ran.append(job.name)
        if job.name == "long":
            await release.wait()
        return job.name

    short_opts = opts.pop("short_opts", None) or {}
    worker: Worker[Any, Any] = Worker(queue.name, work, connection=conn, concurrency=1, **opts)
    await worker.start()
    await queue.add_bulk([{"name": "warm", "data": {}} for _ in range(20)])
    await wait_for(lambda: worker.completed_count == 20, timeout=10)
    await queue.add_bulk(
        [{"name": "long", "data": {}}, {"name": "short", "data": {}, "opts": short_opts}]
    )
    await wait_for(lambda: ran == ["long"] and worker.active_count == 2, timeout=10)
    return worker, release, ran


async def test_a_held_job_goes_back_when_long_runs_fill_every_slot(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    worker, release, ran = await _one_long_then_short(
        queue, conn, hold_window=50, block_timeout=500
    )
    try:
        # The short job was held behind the long one, then given back within about a window.
        other_ran: list[str] = []

        async def other(job: Job[Any, Any]) -> str:
            other_ran.append(job.name)
            return "other"

        async with Worker(queue.name, other, connection=conn, block_timeout=500):
            await wait_for(lambda: other_ran == ["short"], timeout=10)
        assert ran == ["long"], "the held job also ran in the worker that held it"
        release.set()
        await wait_for(lambda: worker.completed_count == 21, timeout=10)
    finally:
        release.set()
        await worker.close()


async def test_held_jobs_go_back_unrun_on_close_even_at_most_once(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    worker, _release, ran = await _one_long_then_short(
        queue, conn, hold_window=60_000, short_opts={"at_most_once": True}
    )
    counts_before = await queue.get_job_counts()
    assert counts_before.active == 2, "the second job was not held"
    await worker.close(force=True)
    assert ran == ["long"]
    short = [j for j in await queue.get_jobs("waiting") if j.name == "short"]
    assert len(short) == 1, "the held at-most-once job is not waiting again"
    assert short[0].attempts_made == 0
    assert await queue.get_dead_letter_jobs() == []


async def test_held_jobs_go_back_when_the_worker_pauses(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    worker, release, ran = await _one_long_then_short(queue, conn, hold_window=60_000)
    try:
        assert (await queue.get_job_counts()).active == 2
        worker.pause()

        async def short_waiting() -> bool:
            return any(j.name == "short" for j in await queue.get_jobs("waiting"))

        await wait_for(short_waiting, timeout=10)
        release.set()
        await wait_for(lambda: worker.completed_count == 21, timeout=10)
        await asyncio.sleep(0.2)
        assert ran == ["long"], "a paused worker started a held job"
    finally:
        release.set()
        await worker.close()


async def test_a_held_job_revoked_before_it_starts_fails_as_revoked(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    async with Queue(queue_name, connection=standalone_conn) as queue:
        worker, release, ran = await _one_long_then_short(
            queue, standalone_conn, hold_window=60_000, lock_duration=1000
        )
        try:
            short = next(j for j in await queue.get_jobs("active") if j.name == "short")
            await queue.revoke(short.id)
            await asyncio.sleep(0.6)  # a heartbeat (lock_duration / 2) reports the revoke
            release.set()
            await wait_state(queue, short.id, "failed")
            final = await queue.get_job(short.id)
            assert final is not None and final.failed_reason == "revoked"
            assert ran == ["long"]
        finally:
            release.set()
            await worker.close()
            await queue.obliterate(force=True)


async def test_a_killed_worker_loses_none_of_its_held_jobs(
    standalone_conn: ConnectionOptions, queue_name: str, tmp_path: Path
) -> None:
    """SIGKILL a worker (another process) while it holds jobs: stall recovery brings back
    every job it had; the jobs it held but never started run once, in the live worker, and
    are not charged a stall."""
    total = 400
    ledger = tmp_path / "dead.ledger"
    out = (tmp_path / "hold_worker.out").open("wb")
    async with Queue(queue_name, connection=standalone_conn) as queue:
        await queue.add_bulk([{"name": "j", "data": {"i": i}} for i in range(total)])
        proc = _spawn_hold_worker(standalone_conn.url, queue_name, ledger, out)
        try:

            async def holding() -> bool:
                if proc.poll() is not None:
                    raise AssertionError("hold worker exited early")
                started = ledger.read_text().count("\n") if ledger.exists() else 0
                active, _ = await _held_and_running(queue)
                return started >= 50 and active >= 2

            await wait_for(holding, timeout=30, interval=0.002)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            out.close()
        at_kill = {j.id for j in await queue.get_jobs("active")}
        dead_runs = ledger.read_text().split()
        held_unstarted = at_kill - set(dead_runs)
        assert len(at_kill) >= 2 and held_unstarted, (
            f"the worker held nothing at the kill (active {sorted(at_kill)})"
        )
        live_runs: list[str] = []

        async def work(job: Job[Any, Any]) -> None:
            live_runs.append(job.id)

        started = time.monotonic()
        async with Worker(
            queue_name,
            work,
            connection=standalone_conn,
            concurrency=4,
            lock_duration=1000,
            stalled_interval=300,
            block_timeout=300,
        ):

            async def all_done() -> bool:
                return (await queue.get_job_counts()).completed == total

            await wait_for(all_done, timeout=60)
            await asyncio.sleep(0.4)  # room for a duplicate run
        recovered_in = time.monotonic() - started
        counts = await queue.get_job_counts()
        assert counts.completed == total and counts.active == 0 and counts.waiting == 0
        assert counts.failed == 0
        assert len(live_runs) == len(set(live_runs)), "a live worker ran a job twice"
        twice = set(dead_runs) & set(live_runs)
        assert twice <= at_kill, f"jobs finished before the kill ran again: {twice - at_kill}"
        for job_id in held_unstarted:
            assert live_runs.count(job_id) == 1, f"held job {job_id} did not run exactly once"
            job = await queue.get_job(job_id)
            # the server knew it never started: back without a stall charged
            assert job is not None and job.stalled_count == 0, (job_id, job and job.stalled_count)
        assert len(dead_runs) == len(set(dead_runs))
        assert recovered_in < 60
        await queue.obliterate(force=True)
