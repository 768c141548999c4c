"""Backpressure: a queue's max_waiting refuses adds past it, atomically, losing nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    Deduplication,
    Job,
    JobOptions,
    Queue,
    QueueFullError,
    RateLimit,
    ValidationError,
    Worker,
)
from tests.helpers import FAST, wait_for, wait_state


async def _ids_in_use(queue: Queue[Any, Any]) -> int:
    ctx = await queue._context()
    raw = await ctx.client.get(queue.keys.id)
    return 0 if raw is None else int(raw)


async def test_limit_is_stored_shared_and_removable(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    assert await queue.get_max_waiting() is None
    await queue.set_max_waiting(3)
    async with Queue(queue.name, connection=conn) as other:
        assert await other.get_max_waiting() == 3
        await other.set_max_waiting(None)
    assert await queue.get_max_waiting() is None
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValidationError):
            await queue.set_max_waiting(bad)  # type: ignore[arg-type]
    assert await queue.get_max_waiting() is None


async def test_add_past_the_limit_raises_and_writes_nothing(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.set_max_waiting(3)
    await queue.add("a", 1)
    await queue.add("b", 2, {"delay": 60_000})  # delayed jobs count: they have not started
    await queue.add("c", 3, {"priority": 5})
    ids_before = await _ids_in_use(queue)
    with pytest.raises(QueueFullError) as info:
        await queue.add("d", 4, {"job_id": "refused-1"})
    assert info.value.queue == queue.name
    with pytest.raises(QueueFullError):
        await queue.add("e", 5)
    # nothing half-written: no job hash, no id taken, counts unchanged
    assert await queue.get_job("refused-1") is None
    assert await _ids_in_use(queue) == ids_before
    assert await queue.count() == 3
    # a producer in another Queue object is held to the same limit
    async with Queue(queue.name, connection=conn) as other:
        with pytest.raises(QueueFullError):
            await other.add("f", 6)


async def test_room_comes_back_as_workers_take_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.set_max_waiting(2)
    await queue.add("a", 1)
    await queue.add("b", 2)
    with pytest.raises(QueueFullError):
        await queue.add("c", 3)

    async def noop(job: Job[Any, Any]) -> None:
        return None

    async with Worker(queue.name, noop, connection=conn, **FAST) as worker:
        await wait_for(lambda: worker.completed_count == 2)
    assert await queue.add("c", 3) is not None
    await queue.set_max_waiting(None)
    assert len(await queue.add_bulk([("x", i) for i in range(10)])) == 10


async def test_concurrent_adds_fill_exactly_to_the_limit(queue: Queue[Any, Any]) -> None:
    await queue.set_max_waiting(4)
    # adds of one loop iteration share one server call; each is still checked on its own
    outcomes = await asyncio.gather(*(queue.add("j", i) for i in range(10)), return_exceptions=True)
    added = [o for o in outcomes if isinstance(o, Job)]
    refused = [o for o in outcomes if isinstance(o, QueueFullError)]
    assert len(added) == 4 and len(refused) == 6
    assert [j.data for j in added] == [0, 1, 2, 3]
    assert await queue.count() == 4


@pytest.mark.parametrize("size", [8, 700])  # one server call, and several pipelined ones
async def test_add_bulk_is_partial_in_order_and_reports_the_refused(
    queue: Queue[Any, Any], size: int
) -> None:
    limit = size - 3 if size < 10 else 400
    await queue.set_max_waiting(limit)
    items = [("j", i) for i in range(size)]
    with pytest.raises(QueueFullError) as info:
        await queue.add_bulk(items)
    err = info.value
    assert err.refused == list(range(limit, size))
    assert len(err.results) == size
    assert [j.data for j in err.results[:limit]] == list(range(limit))  # type: ignore[union-attr]
    assert all(r is None for r in err.results[limit:])
    assert await queue.count() == limit
    # the refused items can be sent again once there is room
    await queue.set_max_waiting(None)
    again = await queue.add_bulk([items[i] for i in err.refused])
    assert all(j is not None for j in again)
    assert await queue.count() == size


async def test_deduplicated_adds_respect_the_limit(queue: Queue[Any, Any]) -> None:
    await queue.set_max_waiting(1)
    debounce = JobOptions(delay=60_000, deduplication=Deduplication(id="k", mode="debounce"))
    first = await queue.add("d", 1, debounce)
    assert first is not None
    # replacing the delayed job keeps the depth the same: allowed while full
    second = await queue.add("d", 2, debounce)
    assert second is not None and await queue.get_job(first.id) is None
    with pytest.raises(QueueFullError):
        await queue.add("s", 3, {"deduplication": {"id": "other"}})
    assert await queue.count() == 1


async def test_add_and_wait_on_a_full_queue_raises_without_waiting(queue: Queue[Any, Any]) -> None:
    await queue.set_max_waiting(0)
    with pytest.raises(QueueFullError):
        await queue.add_and_wait("x", 1, timeout=30)
    assert queue._results is not None and not queue._results._waiters
    assert await queue.count() == 0


async def test_lifo_jobs_count_against_the_limit(queue: Queue[Any, Any]) -> None:
    await queue.set_max_waiting(3)
    await queue.add_bulk([("l", i, {"lifo": True}) for i in range(2)])
    await queue.add("l", 2, {"lifo": True})
    for refused in (queue.add("l", 3, {"lifo": True}), queue.add("p", 4)):
        with pytest.raises(QueueFullError):
            await refused
    assert await queue.count() == 3


async def test_jobs_held_back_by_their_group_count_against_the_limit(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    release = asyncio.Event()

    async def hold(job: Job[Any, Any]) -> None:
        await release.wait()

    one_at_a_time = JobOptions(group_key="g", group_concurrency=1)
    slow = JobOptions(group_key="r", group_concurrency=5, group_rate_limit=RateLimit(1, 60_000))
    jobs = [await queue.add("g", i, one_at_a_time) for i in range(3)]
    jobs += [await queue.add("r", i, slow) for i in range(3)]
    ids = [j.id for j in jobs if j is not None]
    async with Worker(queue.name, hold, connection=conn, concurrency=5, **FAST):
        for job_id, state in zip(ids, ["active", *["group-waiting"] * 2, "active"], strict=False):
            await wait_state(queue, job_id, state)
        for job_id in ids[4:]:
            await wait_state(queue, job_id, "rate-limited")
        # 2 group-waiting + 2 rate-limited jobs have not started: they fill a limit of 4
        await queue.set_max_waiting(4)
        assert await queue.count() == 4
        with pytest.raises(QueueFullError):
            await queue.add("plain", None)
        await queue.set_max_waiting(5)
        assert await queue.add("plain", None) is not None
        release.set()
