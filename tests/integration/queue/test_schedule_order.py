"""The scheduled set keeps its promises: every delay the API accepts keeps a job delayed until
it is due (a long delay never spills into a priority band), and jobs of one priority run
first-in first-out, also when they were added in the same millisecond, in bulk, by a raw
wire-protocol producer, or became due together. Standalone and cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    FlowJob,
    FlowProducer,
    Job,
    JobOptions,
    Queue,
    ValidationError,
    Worker,
)
from glidemq.types import MAX_DELAY, MAX_PRIORITY
from tests.helpers import FAST, wait_for

CENTURY = 100 * 365 * 86_400 * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


async def _fcall_add(
    queue: Queue[Any, Any], *, ts: int, delay: int, priority: int, name: str
) -> Any:
    """glidemq_addJob as a producer written from docs/WIRE_PROTOCOL.md §5 sends it."""
    ctx = await queue._context()
    k = ctx.keys
    return await ctx.fcall(
        "glidemq_addJob",
        [k.id, k.stream, k.scheduled, k.events],
        [
            name,
            "null",
            "{}",
            str(ts),
            str(delay),
            str(priority),
            "",
            "1",
            "",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            "",
        ],
    )


def _s(reply: Any) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


async def _run_in_order(queue: Queue[Any, Any], conn: ConnectionOptions, n: int) -> list[Any]:
    """Start one worker with concurrency 1 and return the job names in the order they ran."""
    seen: list[Any] = []

    async def run(job: Job[Any, Any]) -> None:
        seen.append(job.name)

    async with Worker(queue.name, run, connection=conn, concurrency=1, **FAST):
        await wait_for(lambda: len(seen) >= n, timeout=30)
    return seen


# ------------------------------------------------------------------------------- item 2


async def test_a_century_delay_is_refused_by_the_api(queue: Queue[Any, Any]) -> None:
    with pytest.raises(ValidationError) as err:
        await queue.add("x", {}, {"delay": CENTURY})
    assert err.value.field == "delay"
    with pytest.raises(ValidationError) as err:
        await queue.add_bulk([{"name": "x", "data": 1, "opts": {"delay": CENTURY}}])
    assert err.value.field.endswith("delay")
    with pytest.raises(ValidationError):
        await queue.add("x", {}, {"delay": MAX_DELAY + 1})
    with pytest.raises(ValidationError) as err:
        JobOptions(priority=MAX_PRIORITY + 1)
    assert err.value.field == "priority"
    assert (await queue.get_job_counts()).delayed == 0


async def test_a_century_delay_is_refused_by_the_library(queue: Queue[Any, Any]) -> None:
    ts = now_ms()
    reply = await _fcall_add(queue, ts=ts, delay=CENTURY, priority=0, name="x")
    assert _s(reply) == "ERR:BAD_OPTION"
    reply = await _fcall_add(queue, ts=ts, delay=MAX_DELAY + 1, priority=0, name="x")
    assert _s(reply) == "ERR:BAD_OPTION"
    reply = await _fcall_add(queue, ts=ts, delay=0, priority=MAX_PRIORITY + 1, name="x")
    assert _s(reply) == "ERR:BAD_OPTION"
    c = await queue.get_job_counts()
    assert (c.waiting, c.delayed, c.prioritized) == (0, 0, 0)


async def test_the_longest_delay_keeps_the_job_delayed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    plain = await queue.add("plain", 1, {"delay": MAX_DELAY})
    top = await queue.add("top", 2, {"delay": MAX_DELAY, "priority": MAX_PRIORITY})
    bulk = await queue.add_bulk([{"name": "bulk", "data": 3, "opts": {"delay": MAX_DELAY}}])
    dedup = await queue.add(
        "dedup", 4, {"delay": MAX_DELAY, "deduplication": {"id": "d1"}, "priority": 7}
    )
    async with FlowProducer(connection=conn) as flows:
        node = await flows.add(FlowJob("flow", queue.name, 5, {"delay": MAX_DELAY, "priority": 9}))
    ran: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        ran.append(job.name)

    probe = await queue.add("probe", 0)
    assert plain and top and bulk[0] and dedup and probe
    async with Worker(queue.name, run, connection=conn, **FAST):
        await wait_for(lambda: "probe" in ran, timeout=15)
        await asyncio.sleep(0.3)  # several promotion passes
    assert ran == ["probe"]
    c = await queue.get_job_counts()
    assert (c.delayed, c.prioritized, c.waiting) == (5, 0, 0)
    for job_id in (plain.id, top.id, bulk[0].id, dedup.id, node.job.id):
        fresh = await queue.get_job(job_id)
        assert fresh is not None and fresh.state == "delayed", job_id


async def test_change_delay_and_move_to_delayed_respect_the_maximum(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("d", 1, {"delay": 60_000, "priority": 3})
    assert job is not None
    with pytest.raises(ValidationError) as err:
        await job.change_delay(CENTURY)
    assert err.value.field == "delay"
    await job.change_delay(MAX_DELAY)
    fresh = await queue.get_job(job.id)
    assert fresh is not None and fresh.state == "delayed"
    c = await queue.get_job_counts()
    assert (c.delayed, c.prioritized) == (1, 0)

    outcome: list[str] = []

    async def run(j: Job[Any, Any]) -> None:
        try:
            await j.move_to_delayed(now_ms() + CENTURY)
        except ValidationError as exc:
            outcome.append(exc.field)
        await j.move_to_delayed(now_ms() + MAX_DELAY - 60_000)

    mover = await queue.add("m", 2)
    assert mover is not None
    async with Worker(queue.name, run, connection=conn, **FAST):
        await wait_for(lambda: outcome, timeout=15)

        async def parked() -> bool:
            j = await queue.get_job(mover.id)
            return j is not None and j.state == "delayed"

        await wait_for(parked, timeout=15)
    assert outcome == ["timestamp_ms"]
    assert (await queue.get_job_counts()).delayed == 2


# ------------------------------------------------------------------------------- item 3


async def test_bulk_adds_of_one_priority_run_first_in_first_out(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    names = [f"j{i:02d}" for i in range(12)]
    await queue.add_bulk([{"name": n, "data": None, "opts": {"priority": 4}} for n in names])
    assert await _run_in_order(queue, conn, len(names)) == names


async def test_single_adds_in_one_millisecond_run_first_in_first_out(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    names = [f"s{i:02d}" for i in range(15)]
    for n in names:  # sequential adds: FIFO by the order the server saw them
        await queue.add(n, None, {"priority": 2})
    more = [f"t{i:02d}" for i in range(15)]
    await asyncio.gather(*(queue.add(n, None, {"priority": 2}) for n in more))
    assert await _run_in_order(queue, conn, 30) == names + more


async def test_raw_producer_same_timestamp_runs_first_in_first_out(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ts = now_ms()
    names = [f"r{i:02d}" for i in range(12)]
    for n in names:
        assert not _s(await _fcall_add(queue, ts=ts, delay=0, priority=6, name=n)).startswith("ERR")
    # a higher priority added last still goes first; priority 0 before every band
    await _fcall_add(queue, ts=ts, delay=0, priority=1, name="high")
    await _fcall_add(queue, ts=ts, delay=0, priority=0, name="plain")
    assert await _run_in_order(queue, conn, 14) == ["plain", "high", *names]


async def test_delayed_jobs_due_together_keep_their_order(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ts = now_ms()
    plain = [f"d{i:02d}" for i in range(12)]
    prio = [f"p{i:02d}" for i in range(12)]
    for n in plain:
        await _fcall_add(queue, ts=ts, delay=300, priority=0, name=n)
    for n in prio:
        await _fcall_add(queue, ts=ts, delay=300, priority=3, name=n)
    await queue.add_bulk(
        [{"name": f"b{i:02d}", "data": 0, "opts": {"delay": 300}} for i in range(12)]
    )
    seen = await _run_in_order(queue, conn, 36)
    assert [n for n in seen if n[0] == "d"] == plain
    assert [n for n in seen if n[0] == "p"] == prio
    assert [n for n in seen if n[0] == "b"] == [f"b{i:02d}" for i in range(12)]
    # priority order among the jobs due together: no priority first
    assert seen.index("p00") > seen.index("d11")
