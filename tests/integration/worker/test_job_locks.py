"""Per-job lock durations and at-most-once jobs, with the running worker in another OS process
(tests/fixtures/stall_worker.py) that is frozen (SIGSTOP) or killed (SIGKILL) mid-job."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, ValidationError, Worker
from glidemq.types import JobOptions
from tests.helpers import wait_for
from tests.integration.worker.test_stall import HangingWorker, run_confirmed

LOCK_MS = 1000  # the workers' lock duration
LONG_LOCK_MS = 5000  # the long job's own
STALLED_INTERVAL_MS = 300
SLACK_MS = 1500


async def hang_on(
    queue: Queue[Any, Any], conn: ConnectionOptions, tmp_path: Path, tag: str, opts: Any
) -> tuple[HangingWorker, str]:
    """Add a job and let a worker process take it and hang on it."""
    job = await queue.add(tag, {"tag": tag}, opts)
    assert job is not None
    worker = HangingWorker(conn, queue.name, tmp_path / f"{tag}.out")

    async def hanging_on_it() -> bool:
        if worker.proc.poll() is not None:
            raise AssertionError(f"stall worker exited early:\n{worker.output()}")
        lines, _ = await queue.get_job_logs(job.id)
        return f"started pid={worker.proc.pid}" in lines and await run_confirmed(queue, job.id)

    await wait_for(hanging_on_it, timeout=30, interval=0.05)
    return worker, job.id


def recovery_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions, runs: list[str]
) -> Worker[Any, Any]:
    async def finish(job: Job[Any, Any]) -> str:
        runs.append(job.id)
        return "recovered"

    return Worker(
        queue.name,
        finish,
        connection=conn,
        lock_duration=LOCK_MS,
        stalled_interval=STALLED_INTERVAL_MS,
        block_timeout=500,
    )


async def test_a_job_with_a_long_lock_is_reclaimed_only_when_its_own_lock_passed(
    queue: Queue[Any, Any], conn: ConnectionOptions, tmp_path: Path
) -> None:
    long_w, long_id = await hang_on(queue, conn, tmp_path, "long", {"lock_duration": LONG_LOCK_MS})
    short_w, short_id = await hang_on(queue, conn, tmp_path, "short", None)
    runs: list[str] = []
    try:
        os.kill(long_w.proc.pid, signal.SIGSTOP)
        os.kill(short_w.proc.pid, signal.SIGSTOP)
        frozen_at = int(time.time() * 1000)
        async with recovery_worker(queue, conn, runs):

            async def done(job_id: str) -> bool:
                stored = await queue.get_job(job_id)
                return stored is not None and stored.state == "completed"

            await wait_for(lambda: done(short_id), timeout=LOCK_MS / 1000 + 10)
            short = await queue.get_job(short_id)
            assert short is not None and short.finished_on is not None
            assert short.finished_on - frozen_at <= LOCK_MS + STALLED_INTERVAL_MS + SLACK_MS
            # past the workers' lock, the long job is still its frozen worker's
            long_now = await queue.get_job(long_id)
            assert long_now is not None and long_now.state == "active", long_now
            await wait_for(lambda: done(long_id), timeout=LONG_LOCK_MS / 1000 + 10)
        long = await queue.get_job(long_id)
        assert long is not None and long.finished_on is not None
        # idle counts from the last heartbeat before the freeze (every lock / 3 at most)
        waited = long.finished_on - frozen_at
        assert waited >= LONG_LOCK_MS - LOCK_MS / 3 - 50, waited
        assert runs == [short_id, long_id]
        assert long.stalled_count == 1
    finally:
        for w in (long_w, short_w):
            if w.proc.poll() is None:
                os.kill(w.proc.pid, signal.SIGCONT)
            w.cleanup()


async def test_lock_duration_is_validated_and_stored_in_the_job_hash(
    queue: Queue[Any, Any],
) -> None:
    with pytest.raises(ValidationError, match="lock_duration"):
        JobOptions(lock_duration=50)
    with pytest.raises(ValidationError, match="lock_duration"):
        JobOptions(lock_duration=True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="at_most_once"):
        JobOptions(at_most_once=1)  # type: ignore[arg-type]
    job = await queue.add("j", None, {"lock_duration": 60_000, "at_most_once": True})
    assert job is not None
    ctx = await queue._context()
    key = queue.keys.job(job.id)
    fields = await ctx.command(lambda c: c.hmget(key, ["lockDuration", "atMostOnce"]))
    assert fields == [b"60000", b"1"]


async def test_an_at_most_once_job_whose_worker_was_killed_is_dead_lettered_not_rerun(
    queue: Queue[Any, Any], conn: ConnectionOptions, tmp_path: Path
) -> None:
    dying, job_id = await hang_on(queue, conn, tmp_path, "once", {"at_most_once": True})
    plain_w, plain_id = await hang_on(queue, conn, tmp_path, "plain", None)
    runs: list[str] = []
    try:
        dying.kill()
        plain_w.kill()
        async with recovery_worker(queue, conn, runs):

            async def settled() -> bool:
                once = await queue.get_job(job_id)
                plain = await queue.get_job(plain_id)
                return (
                    once is not None
                    and once.state == "failed"
                    and plain is not None
                    and plain.state == "completed"
                )

            await wait_for(settled, timeout=LOCK_MS / 1000 + 10)
            await asyncio.sleep(2 * STALLED_INTERVAL_MS / 1000)  # room for a wrong re-run
        once = await queue.get_job(job_id)
        assert once is not None and once.failed_reason == "interrupted"
        assert [j.id for j in await queue.get_dead_letter_jobs()] == [job_id]
        assert runs == [plain_id]  # the plain job ran again, the at-most-once one never
        lines, _ = await queue.get_job_logs(job_id)
        assert lines == [f"started pid={dying.proc.pid}"]
    finally:
        dying.cleanup()
        plain_w.cleanup()


async def test_an_at_most_once_job_handed_back_by_close_is_dead_lettered(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    started = asyncio.Event()
    runs: list[str] = []

    async def hang(job: Job[Any, Any]) -> None:
        runs.append(job.id)
        started.set()
        await asyncio.Event().wait()

    job = await queue.add("once", None, {"at_most_once": True})
    assert job is not None
    worker = Worker(queue.name, hang, connection=conn, block_timeout=500)
    async with worker:
        await asyncio.wait_for(started.wait(), 10)
        await worker.close(timeout=0.1)
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.state == "failed"
    assert stored.failed_reason == "interrupted"
    assert [j.id for j in await queue.get_dead_letter_jobs()] == [job.id]
    # a new worker finds nothing to run
    async with recovery_worker(queue, conn, runs):
        await asyncio.sleep(1.0)
    assert runs == [job.id]
    counts = await queue.get_job_counts()
    assert counts.waiting == 0 and counts.active == 0
