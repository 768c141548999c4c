"""`Queue.get_backlog`: the jobs waiting to start as an autoscaler needs them counted: due
delayed jobs that no worker promoted yet count (JobCounts still calls them delayed), jobs
parked in groups count, and the age of the oldest one is measured from when it became
ready."""

from __future__ import annotations

import asyncio
from typing import Any

from glidemq import Backlog, JobOptions
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for


async def test_an_empty_queue_has_no_backlog(backend: Backend) -> None:
    b = await backend.queue.get_backlog()
    assert isinstance(b, Backlog)
    assert (b.waiting, b.prioritized, b.due, b.grouped, b.active, b.delayed) == (0,) * 6
    assert (b.to_start, b.oldest_ready_at, b.oldest_age, b.paused) == (0, None, 0.0, False)


async def test_each_kind_of_job_waiting_to_start_is_counted_with_no_worker(
    backend: Backend,
) -> None:
    q = backend.queue
    before = backend.now_ms()
    await q.add("plain", 0)
    after = backend.now_ms()
    await q.add_bulk([("plain", i, None) for i in (1, 2)])
    await q.add("last-in", 3, {"lifo": True})
    await q.add_bulk([("prio", i, {"priority": 2}) for i in (4, 5)])
    await q.add_bulk([("soon", i, {"delay": 100}) for i in (6, 7)])
    await q.add("later", 8, {"delay": 3_600_000})
    # a fair group of weight 2: two of its jobs enter the stream, three wait in the group
    fair = JobOptions(group_key="tenant", group_weight=2)
    await q.add_bulk([("fair", i, fair) for i in range(9, 14)])

    b = await q.get_backlog()
    assert (b.waiting, b.prioritized, b.due, b.grouped) == (3 + 1 + 2, 2, 0, 3)
    assert (b.delayed, b.active, b.to_start) == (3, 0, 11)
    assert b.oldest_ready_at is not None and before <= b.oldest_ready_at <= after

    await backend.elapse(150)  # the two short delays pass; nothing promotes them
    b = await q.get_backlog()
    assert (b.due, b.delayed, b.to_start) == (2, 1, 13)
    assert (await q.get_job_counts()).delayed == 3  # still "delayed" to the counts
    assert b.oldest_age >= 0.15
    assert b.oldest_age == (b.now - b.oldest_ready_at) / 1000  # type: ignore[operator]


async def test_the_oldest_is_when_a_job_became_ready_not_when_it_was_added(
    backend: Backend,
) -> None:
    q = backend.queue
    job = await q.add("soon", None, {"delay": 100, "priority": 3})
    assert job is not None
    b = await q.get_backlog()
    assert (b.to_start, b.delayed, b.oldest_ready_at) == (0, 1, None)
    await backend.elapse(150)
    b = await q.get_backlog()
    assert (b.due, b.oldest_ready_at) == (1, job.timestamp + 100)

    prio = await backend.other_queue().add("prio", None, {"priority": 7})
    assert prio is not None
    other = await backend.others[0].get_backlog()
    assert (other.prioritized, other.oldest_ready_at) == (1, prio.timestamp)


async def test_running_jobs_are_active_and_a_paused_queue_says_so(backend: Backend) -> None:
    gate = asyncio.Event()

    async def hold(job: Any) -> None:
        await gate.wait()

    q = backend.queue
    await q.add_bulk([("j", i, None) for i in range(4)])
    async with backend.worker(hold, concurrency=2, hold_window=0):

        async def two_running() -> Backlog | None:
            b = await q.get_backlog()
            return b if b.active == 2 else None

        b = await wait_for(two_running)
        assert (b.waiting, b.to_start) == (2, 2)
        await q.pause()
        assert (await q.get_backlog()).paused
        gate.set()
        await q.resume()

        async def drained() -> bool:
            b = await q.get_backlog()
            return b.to_start == 0 and b.active == 0

        await wait_for(drained, timeout=10)
    assert not (await q.get_backlog()).paused
