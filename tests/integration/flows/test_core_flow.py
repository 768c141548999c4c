"""Adding, processing, completing: the basic life of jobs on standalone and cluster."""

from __future__ import annotations

import asyncio
from typing import Any

from glidemq import ConnectionOptions, Job, Queue, Worker
from tests.helpers import wait_for


async def test_add_returns_waiting_job_with_fields(queue: Queue[Any, Any]) -> None:
    job = await queue.add("email", {"to": "ada@example.com"})
    assert job is not None
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.name == "email"
    assert stored.data == {"to": "ada@example.com"}
    assert stored.state == "waiting"
    assert stored.attempts_made == 0
    counts = await queue.get_job_counts()
    assert counts.waiting == 1 and counts.active == 0


async def test_worker_processes_jobs_and_stores_results(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    jobs = await queue.add_bulk([("double", {"n": i}) for i in range(200)])
    seen: list[int] = []

    async def double(job: Job[dict[str, int], int]) -> int:
        seen.append(job.data["n"])
        return job.data["n"] * 2

    async with Worker(queue.name, double, connection=conn, concurrency=20) as worker:
        await wait_for(lambda: worker.completed_count == 200)
    assert sorted(seen) == list(range(200))
    first = await queue.get_job(jobs[7].id)  # type: ignore[union-attr]
    assert first is not None and first.state == "completed" and first.returnvalue == 14
    assert first.finished_on is not None and first.processed_on is not None
    counts = await queue.get_job_counts()
    assert counts.completed == 200 and counts.waiting == 0 and counts.active == 0


async def test_concurrency_is_never_exceeded(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("j", i) for i in range(60)])
    running = 0
    peak = 0

    async def slow(job: Job[int, None]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    async with Worker(queue.name, slow, connection=conn, concurrency=5) as worker:
        await wait_for(lambda: worker.completed_count == 60)
    assert peak == 5


async def test_jobs_added_while_worker_idles_are_picked_up(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        done.append(job.id)

    async with Worker(queue.name, record, connection=conn, block_timeout=500):
        await asyncio.sleep(0.3)  # let the worker reach its blocking read
        job = await queue.add("late", None)
        assert job is not None
        await wait_for(lambda: job.id in done)


async def test_close_leaves_nothing_active(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    await queue.add_bulk([("slow", i) for i in range(10)])
    started = asyncio.Event()

    async def hang(job: Job[int, None]) -> None:
        started.set()
        await asyncio.sleep(30)

    worker = Worker(queue.name, hang, connection=conn, concurrency=4)
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await worker.close(timeout=0.2)
    counts = await queue.get_job_counts()
    assert counts.active == 0
    assert counts.waiting == 10
    assert counts.completed == 0 and counts.failed == 0
