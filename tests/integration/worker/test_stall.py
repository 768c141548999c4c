"""Stall recovery: a worker process is SIGKILLed mid-job; another worker recovers the job.

The dying worker runs in its own OS process (tests/fixtures/stall_worker.py), so nothing of it
survives the kill: no heartbeat, no close, no hand-back. Only the PEL and XAUTOCLAIM bring
the job back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, QueueEvent, QueueEvents, Worker
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[3]
STALL_WORKER = ROOT / "tests" / "fixtures" / "stall_worker.py"
LOCK_MS = 1000
STALLED_INTERVAL_MS = 500
SLACK_MS = 1000


class HangingWorker:
    """The subprocess running stall_worker.py, with its output kept for failure messages."""

    def __init__(self, conn: ConnectionOptions, queue_name: str, out: Path) -> None:
        self.out = out
        self._file = out.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(STALL_WORKER), conn.url, queue_name, str(LOCK_MS)],
            cwd=ROOT,
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self._file.flush()
        return self.out.read_text(errors="replace")

    def kill(self) -> int:
        """SIGKILL the process; returns the wall-clock time of the kill in ms."""
        os.kill(self.proc.pid, signal.SIGKILL)
        killed_at = int(time.time() * 1000)
        self.proc.wait(timeout=10)
        return killed_at

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._file.close()


async def run_confirmed(queue: Queue[Any, Any], job_id: str) -> bool:
    """Whether the worker running the job has confirmed its start to the server (the run
    lasted a moment, glidemq/worker/starts.py): a stall of it is then charged."""
    ctx = await queue._context()
    key = queue.keys.job(job_id)
    return await ctx.command(lambda c: c.hget(key, "unsureEntry")) is None


@pytest.fixture
async def hanging(
    queue: Queue[Any, Any], conn: ConnectionOptions, tmp_path: Path
) -> AsyncIterator[tuple[HangingWorker, str]]:
    """A job taken by a worker in another process, which is now hanging on it (and has told
    the server its run is under way, glidemq/worker/starts.py)."""
    job = await queue.add("victim", {"payload": 1}, {"attempts": 1})
    assert job is not None
    worker = HangingWorker(conn, queue.name, tmp_path / "stall_worker.out")
    try:

        async def hanging_on_it() -> bool:
            if worker.proc.poll() is not None:
                raise AssertionError(f"stall worker exited early:\n{worker.output()}")
            stored = await queue.get_job(job.id)
            if stored is None or stored.state != "active":
                return False
            lines, _ = await queue.get_job_logs(job.id)
            return f"started pid={worker.proc.pid}" in lines and await run_confirmed(queue, job.id)

        await wait_for(hanging_on_it, timeout=30, interval=0.05)
        yield worker, job.id
    finally:
        worker.cleanup()


async def test_killed_workers_job_is_recovered_exactly_once(
    queue: Queue[Any, Any], conn: ConnectionOptions, hanging: tuple[HangingWorker, str]
) -> None:
    dying, job_id = hanging
    runs: list[str] = []

    async def finish(job: Job[Any, str]) -> str:
        runs.append(job.id)
        return "recovered"

    killed_at = dying.kill()
    assert dying.proc.returncode == -signal.SIGKILL
    worker = Worker(
        queue.name,
        finish,
        connection=conn,
        lock_duration=LOCK_MS,
        stalled_interval=STALLED_INTERVAL_MS,
        block_timeout=500,
    )
    async with worker:

        async def completed() -> bool:
            stored = await queue.get_job(job_id)
            return stored is not None and stored.state == "completed"

        await wait_for(completed, timeout=10)
        await asyncio.sleep(STALLED_INTERVAL_MS / 1000 + 0.1)  # room for a duplicate run
    final = await queue.get_job(job_id)
    assert final is not None and final.finished_on is not None
    limit = LOCK_MS + STALLED_INTERVAL_MS + SLACK_MS
    assert final.finished_on - killed_at <= limit, (
        f"recovered {final.finished_on - killed_at} ms after the kill, limit {limit} ms"
    )
    assert runs == [job_id]
    assert final.returnvalue == "recovered"
    assert final.stalled_count == 1
    assert final.attempts_made == 0
    assert worker.completed_count == 1
    assert [j.id for j in await queue.get_jobs("completed")] == [job_id]
    counts = await queue.get_job_counts()
    assert counts.completed == 1
    assert counts.active == 0 and counts.waiting == 0 and counts.delayed == 0
    assert counts.failed == 0 and counts.prioritized == 0
    lines, _ = await queue.get_job_logs(job_id)
    assert lines == [f"started pid={dying.proc.pid}"]


async def test_stalled_job_is_reported_to_listeners(
    queue: Queue[Any, Any], conn: ConnectionOptions, hanging: tuple[HangingWorker, str]
) -> None:
    dying, job_id = hanging
    seen: list[QueueEvent] = []
    worker_stalled: list[tuple[int, int]] = []

    async def finish(job: Job[Any, None]) -> None:
        return None

    async with QueueEvents(queue.name, connection=conn, block_timeout=200) as events:
        events.on("stalled", seen.append)
        dying.kill()
        worker = Worker(
            queue.name,
            finish,
            connection=conn,
            lock_duration=LOCK_MS,
            stalled_interval=STALLED_INTERVAL_MS,
            block_timeout=500,
        )
        worker.on("stalled", lambda requeued, failed: worker_stalled.append((requeued, failed)))
        async with worker:
            await wait_for(lambda: seen and worker_stalled, timeout=10)
    assert [e.job_id for e in seen] == [job_id]
    assert worker_stalled == [(1, 0)]


async def test_job_stalled_more_than_max_stalled_count_fails(
    queue: Queue[Any, Any], conn: ConnectionOptions, hanging: tuple[HangingWorker, str]
) -> None:
    dying, job_id = hanging
    runs: list[str] = []

    async def finish(job: Job[Any, None]) -> None:
        runs.append(job.id)

    dying.kill()
    worker = Worker(
        queue.name,
        finish,
        connection=conn,
        lock_duration=LOCK_MS,
        stalled_interval=STALLED_INTERVAL_MS,
        max_stalled_count=0,
        block_timeout=500,
    )
    async with worker:

        async def failed() -> bool:
            stored = await queue.get_job(job_id)
            return stored is not None and stored.state == "failed"

        await wait_for(failed, timeout=10)
        await asyncio.sleep(STALLED_INTERVAL_MS / 1000 + 0.1)
    final = await queue.get_job(job_id)
    assert final is not None
    assert final.failed_reason == "job stalled more than allowable limit"
    assert final.stalled_count == 1
    assert runs == []
    counts = await queue.get_job_counts()
    assert counts.failed == 1
    assert counts.active == 0 and counts.waiting == 0 and counts.completed == 0


async def test_stall_recovery_is_logged_with_how_many_and_from_whom(
    queue: Queue[Any, Any],
    conn: ConnectionOptions,
    hanging: tuple[HangingWorker, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead, job_id = hanging
    (owner,) = [w.id for w in await queue.get_workers() if w.pid == dead.proc.pid]
    dead.kill()
    caplog.set_level(logging.WARNING, logger="glidemq.worker")

    async def taken_back(job: Job[Any, Any]) -> str:
        return "recovered"

    settings = {"lock_duration": LOCK_MS, "stalled_interval": STALLED_INTERVAL_MS}
    async with Worker(queue.name, taken_back, connection=conn, **settings):

        def logged() -> list[logging.LogRecord]:
            return [
                r for r in caplog.records if getattr(r, "glidemq", {}).get("event") == "stalled"
            ]

        (record,) = await wait_for(logged, timeout=LOCK_MS / 1000 + 10)
        recovered = await queue.get_job(job_id)
        assert recovered is not None
        assert await recovered.wait_until_finished(timeout=10) == "completed"
    facts = record.glidemq  # type: ignore[attr-defined]
    assert (facts["requeued"], facts["failed"], facts["from"]) == (1, 0, {owner: 1})
    assert f"took back 1 stalled job(s) from {owner} (1)" in record.getMessage()
