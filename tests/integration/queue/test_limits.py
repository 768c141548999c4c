"""Queue-wide limits: the worker limiter and the global rate limit (shared by every worker of
the queue), global concurrency, and RateLimitError / Worker.rate_limit.

Rate assertions count jobs, not time: starts seen over an elapsed time E may be at most
`max * (windows(E) + 1)`, since a fixed window may open just before the first start. Elapsed
time only grows on a slow machine, so the bounds never fail because of load.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    Job,
    Queue,
    RateLimit,
    RateLimitError,
    ValidationError,
    Worker,
    WorkerOptions,
)
from tests.helpers import FAST, wait_for


def assert_within_rate(starts: list[float], max_: int, duration_ms: int) -> None:
    """Jobs started at `starts` (monotonic seconds) kept to `max_` per `duration_ms` window."""
    elapsed_ms = (max(starts) - min(starts)) * 1000 + 5  # + clock granularity
    windows = math.ceil(elapsed_ms / duration_ms)
    assert len(starts) <= max_ * (windows + 1), (len(starts), elapsed_ms)


async def add_n(queue: Queue[Any, Any], n: int, **opts: Any) -> None:
    jobs = await queue.add_bulk([("job", {"i": i}, opts or None) for i in range(n)])
    assert all(j is not None for j in jobs)


async def test_worker_limiter_is_shared_by_all_workers_of_the_queue(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    starts: list[float] = []
    by_worker: dict[str, int] = {}

    def processor(tag: str) -> Any:
        async def run(job: Job[Any, Any]) -> None:
            starts.append(time.monotonic())
            by_worker[tag] = by_worker.get(tag, 0) + 1

        return run

    await add_n(queue, 20)
    limiter = RateLimit(max=4, duration=200)
    w1 = Worker(queue.name, processor("a"), connection=conn, concurrency=10, limiter=limiter)
    w2 = Worker(queue.name, processor("b"), connection=conn, concurrency=10, limiter=limiter)
    async with w1, w2:
        await wait_for(lambda: len(starts) == 20, timeout=20)
    # 20 jobs at 4 per 200 ms take 4 full windows at least; per-worker counting would allow 8
    assert_within_rate(starts, 4, 200)
    assert sum(by_worker.values()) == 20


async def test_limiter_option_accepts_a_mapping_and_rejects_bad_values() -> None:
    assert WorkerOptions(limiter={"max": 3, "duration": 50}).limiter == RateLimit(3, 50)
    with pytest.raises(ValidationError, match=r"limiter\.max"):
        WorkerOptions(limiter={"max": 0, "duration": 50})
    with pytest.raises(ValidationError, match="limiter"):
        WorkerOptions(limiter={"max": 1})


async def test_global_rate_limit_is_kept_and_can_be_removed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    assert await queue.get_global_rate_limit() is None
    await queue.set_global_rate_limit(3, 250)
    assert await queue.get_global_rate_limit() == RateLimit(3, 250)
    starts: list[float] = []

    async def run(job: Job[Any, Any]) -> None:
        starts.append(time.monotonic())

    await add_n(queue, 12)
    async with Worker(queue.name, run, connection=conn, concurrency=20, **FAST):
        await wait_for(lambda: len(starts) == 12, timeout=20)
        assert_within_rate(starts, 3, 250)
        await queue.remove_global_rate_limit()
        assert await queue.get_global_rate_limit() is None
        await add_n(queue, 30)
        await wait_for(lambda: len(starts) == 42, timeout=20)
    with pytest.raises(ValidationError):
        await queue.set_global_rate_limit(0, 100)


async def test_global_concurrency_is_never_exceeded_across_workers(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.set_global_concurrency(3)
    assert await queue.get_global_concurrency() == 3
    running = 0
    peak = 0
    done = 0

    async def run(job: Job[Any, Any]) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        done += 1

    await add_n(queue, 30)
    w1 = Worker(queue.name, run, connection=conn, concurrency=5, **FAST)
    w2 = Worker(queue.name, run, connection=conn, concurrency=5, **FAST)
    async with w1, w2:
        await wait_for(lambda: done == 30, timeout=20)
    assert 1 <= peak <= 3
    await queue.set_global_concurrency(0)
    assert await queue.get_global_concurrency() == 0
    with pytest.raises(ValidationError):
        await queue.set_global_concurrency(-1)


async def test_rate_limit_error_hands_the_job_back_and_pauses_the_queue(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs: list[tuple[str, float]] = []
    raised_at: list[float] = []

    async def run(job: Job[Any, Any]) -> str:
        runs.append((job.id, time.monotonic()))
        if job.data["i"] == 0 and not raised_at:
            raised_at.append(time.monotonic())
            raise RateLimitError(400)  # the job goes back, nothing starts for 400 ms
        return "done"

    await add_n(queue, 3)
    async with Worker(queue.name, run, connection=conn, concurrency=1, prefetch=1, **FAST):
        await wait_for(lambda: _completed(queue, 3), timeout=10)
    after = [t for _, t in runs[1:]]
    assert min(after) - raised_at[0] >= 0.4 - 0.02
    job = await queue.get_job(runs[0][0])
    assert job is not None and job.state == "completed"
    assert job.attempts_made == 0 and job.failed_reason is None
    assert [jid for jid, _ in runs].count(job.id) == 2


async def _completed(queue: Queue[Any, Any], n: int) -> bool:
    return (await queue.get_job_counts()).completed == n


async def test_worker_rate_limit_from_the_processor(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    starts: list[float] = []
    worker: Worker[Any, Any]

    async def run(job: Job[Any, Any]) -> None:
        starts.append(time.monotonic())
        if len(starts) == 1:
            await worker.rate_limit(300)
            raise Worker.RateLimitError()

    await add_n(queue, 2)
    worker = Worker(queue.name, run, connection=conn, concurrency=1, prefetch=1, **FAST)
    async with worker:
        await wait_for(lambda: _completed(queue, 2), timeout=10)
    assert len(starts) == 3
    assert starts[1] - starts[0] >= 0.3 - 0.02
    with pytest.raises(ValidationError):
        await worker.rate_limit(-5)
