"""Request/response, backpressure and queue-wide limits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from glide import StreamGroupOptions

from glidemq import JobFailedError, JobTimeoutError, QueueFullError, ValidationError, Worker
from glidemq.wire import fetch as wire_fetch
from tests.behaviour.conftest import GUARD, Backend
from tests.helpers import wait_for, wait_state


async def _price(job: Any) -> float:
    if job.data["qty"] < 0:
        raise ValueError("negative quantity")
    return float(job.data["qty"]) * 2.5


async def test_add_and_wait_returns_the_result_or_raises_the_failure(backend: Backend) -> None:
    q = backend.queue
    async with backend.worker(_price, concurrency=5):
        assert await q.add_and_wait("quote", {"qty": 4}, timeout=10) == 10.0
        with pytest.raises(JobFailedError) as info:
            await q.add_and_wait("quote", {"qty": -1}, timeout=10)
        assert info.value.reason == "negative quantity"
        assert "ValueError" in (info.value.stacktrace or "")
        first = await q.add_and_wait("quote", {"qty": 2}, {"job_id": "order-7"}, timeout=10)
        again = await q.add_and_wait("quote", {"qty": 999}, {"job_id": "order-7"}, timeout=10)
        assert first == again == 5.0
    with pytest.raises(ValidationError):
        await q.add_and_wait("quote", {"qty": 1}, timeout=0)


async def test_add_and_wait_times_out_and_leaves_the_job_queued(backend: Backend) -> None:
    with pytest.raises(JobTimeoutError):
        await backend.queue.add_and_wait("quote", {"qty": 1}, {"job_id": "later"}, timeout=0.2)
    job = await backend.queue.get_job("later")
    assert job is not None and job.state == "waiting"


async def test_max_waiting_refuses_adds_past_the_limit(backend: Backend) -> None:
    q = backend.queue
    await q.set_max_waiting(3)
    assert await q.get_max_waiting() == 3
    with pytest.raises(QueueFullError) as info:
        await q.add_bulk([("j", i) for i in range(5)])
    assert info.value.refused == [3, 4]
    assert [j is not None for j in info.value.results] == [True, True, True, False, False]
    with pytest.raises(QueueFullError):
        await q.add("one-more", None)
    assert await q.count() == 3
    with pytest.raises(ValidationError):
        await q.set_max_waiting(-1)
    await q.set_max_waiting(None)
    assert await q.get_max_waiting() is None
    assert await q.add("fits", None) is not None


async def test_global_concurrency_caps_running_jobs_over_all_workers(backend: Backend) -> None:
    running = 0
    peak = 0

    async def busy(job: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.03)
        running -= 1

    await backend.queue.set_global_concurrency(1)
    assert await backend.queue.get_global_concurrency() == 1
    await backend.queue.add_bulk([("j", i) for i in range(6)])
    async with backend.worker(busy, concurrency=3) as a, backend.worker(busy, concurrency=3) as b:
        await wait_for(lambda: a.completed_count + b.completed_count == 6)
    assert peak == 1


async def test_rate_limit_error_puts_the_job_back_without_an_attempt(backend: Backend) -> None:
    runs = 0

    async def limited_once(job: Any) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise Worker.RateLimitError()
        return "ok"

    job = await backend.queue.add("r", None, {"attempts": 1})
    assert job is not None
    async with backend.worker(limited_once) as worker:
        final = await wait_state(backend.queue, job.id, "completed")
        assert worker.failed_count == 0
    assert runs == 2 and final.attempts_made == 0


async def test_worker_rate_limit_stops_the_queue_for_a_while(backend: Backend) -> None:
    ran: list[int] = []

    async def record(job: Any) -> None:
        ran.append(backend.now_ms())

    async with backend.worker(record) as worker:
        await worker.rate_limit(1500)
        start = backend.now_ms()
        job = await backend.queue.add("held", None)
        assert job is not None
        await asyncio.sleep(0.2)
        assert ran == [] and await job.get_state() == "waiting"
        await backend.elapse(1500)
        await wait_state(backend.queue, job.id, "completed")
    assert ran[0] - start >= 1300  # the pause began a moment before `start`


async def test_global_rate_limit_caps_jobs_per_window(backend: Backend) -> None:
    await backend.queue.set_global_rate_limit(2, 2000)
    limit = await backend.queue.get_global_rate_limit()
    assert limit is not None and (limit.max, limit.duration) == (2, 2000)
    await backend.queue.add_bulk([("j", i) for i in range(4)])
    async with backend.worker(_price_free, concurrency=4) as worker:
        await wait_for(lambda: worker.completed_count == 2)
        await asyncio.sleep(0.2)
        assert worker.completed_count == 2
        await backend.elapse(2000 + GUARD)  # a start stays in its window a little longer
        await wait_for(lambda: worker.completed_count == 4)
    await backend.queue.remove_global_rate_limit()
    assert await backend.queue.get_global_rate_limit() is None


async def _price_free(job: Any) -> None:
    return None


async def test_a_fetch_that_arrives_late_does_not_reopen_the_rate_window(
    backend: Backend,
) -> None:
    # A fetch carries its sender's `now`; one that waited 5 s (queued behind a stalled server,
    # or resent after a lost reply) used to stamp its starts 5 s in the past, so the next
    # fetch trimmed them from the window at once and started two more (found by glidemq.sim).
    q = backend.queue
    await q.set_global_rate_limit(2, 1000)
    await q.add_bulk([("j", i) for i in range(6)])
    ctx = await q._context()
    stream = q.keys.stream
    await ctx.command(
        lambda c: c.xgroup_create(stream, "workers", "0", StreamGroupOptions(make_stream=True))
    )
    late = await wire_fetch.complete_and_fetch_next(
        ctx, backend.now_ms() - 5000, "late", 2, "1", (), ()
    )
    fresh = await wire_fetch.complete_and_fetch_next(ctx, backend.now_ms(), "fresh", 2, "1", (), ())
    assert len(late.entries) // 3 == 2
    assert len(fresh.entries) == 0 and fresh.limited_ms > 0
