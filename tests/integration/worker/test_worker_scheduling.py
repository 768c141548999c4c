"""When jobs run: delays, priorities, changing them, ttl, and moving a running job to delayed."""

from __future__ import annotations

import asyncio
from typing import Any

from glidemq import ConnectionOptions, Job, JobOptions, Queue, Worker
from glidemq.client.context import now_ms
from tests.helpers import FAST, job_state, wait_for, wait_state


async def test_delayed_job_runs_only_after_its_delay(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran_at: dict[str, int] = {}

    async def record(job: Job[Any, None]) -> None:
        ran_at[job.id] = now_ms()

    async with Worker(queue.name, record, connection=conn, **FAST):
        job = await queue.add("later", None, JobOptions(delay=600))
        assert job is not None
        assert await job_state(queue, job.id) == "delayed"
        assert (await queue.get_job_counts()).delayed == 1
        await wait_state(queue, job.id, "completed", timeout=5)
    assert ran_at[job.id] >= job.timestamp + 600
    final = await queue.get_job(job.id)
    assert final is not None and final.processed_on is not None
    assert final.processed_on >= job.timestamp + 600


async def test_priorities_run_in_order_after_plain_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    # Fewer than 10 jobs: within one priority band the scheduled set orders members by id
    # (the wire format's score is `priority * 2^42` alone), so single-digit ids keep FIFO.
    plan = [5, 1, 3, 0, 5, 1, 3, 0, 1]
    added: list[tuple[int, str]] = []
    for p in plan:
        job = await queue.add(f"p{p}", p, JobOptions(priority=p))
        assert job is not None
        added.append((p, job.id))
    counts = await queue.get_job_counts()
    assert counts.waiting == 2 and counts.prioritized == 7

    order: list[str] = []

    async def record(job: Job[int, None]) -> None:
        order.append(job.id)

    async with Worker(queue.name, record, connection=conn, concurrency=1, **FAST):
        await wait_for(lambda: len(order) == len(plan))
    expected = [jid for _, jid in sorted(added, key=lambda pj: (pj[0], int(pj[1])))]
    assert order == expected
    priorities = [dict((jid, p) for p, jid in added)[jid] for jid in order]
    assert priorities == [0, 0, 1, 1, 1, 3, 3, 5, 5]


async def test_prioritized_jobs_added_while_busy_still_run_in_priority_order(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    gate = asyncio.Event()
    order: list[int] = []

    async def record(job: Job[int, None]) -> None:
        if job.data == -1:
            await gate.wait()
        order.append(job.data)

    async with Worker(queue.name, record, connection=conn, concurrency=1, **FAST):
        blocker = await queue.add("blocker", -1)
        assert blocker is not None
        await wait_state(queue, blocker.id, "active")
        await queue.add("p", 7, JobOptions(priority=7))
        # several promotion ticks (20 ms) pass with the only slot busy: 7 must stay behind
        # the more urgent jobs added after it
        await asyncio.sleep(0.2)
        for p in (2, 9, 4):
            await queue.add("p", p, JobOptions(priority=p))
        gate.set()
        await wait_for(lambda: len(order) == 5)
    assert order == [-1, 2, 4, 7, 9]


async def test_change_priority_reorders_jobs_not_yet_running(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    a = await queue.add("a", "a")
    b = await queue.add("b", "b")
    c = await queue.add("c", "c", JobOptions(priority=8))
    assert a is not None and b is not None and c is not None

    await a.change_priority(10)  # waiting -> prioritized, behind c
    assert a.state == "prioritized" and await job_state(queue, a.id) == "prioritized"
    await c.change_priority(0)  # prioritized -> waiting, behind b in the stream
    assert c.state == "waiting" and await job_state(queue, c.id) == "waiting"
    stored = await queue.get_job(a.id)
    assert stored is not None and stored.priority == 10
    counts = await queue.get_job_counts()
    assert counts.waiting == 2 and counts.prioritized == 1

    order: list[str] = []

    async def record(job: Job[str, None]) -> None:
        order.append(job.data)

    async with Worker(queue.name, record, connection=conn, concurrency=1, **FAST):
        await wait_for(lambda: len(order) == 3)
    assert order == ["b", "c", "a"]


async def test_change_delay_reschedules_a_delayed_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran_at: list[int] = []

    async def record(job: Job[Any, None]) -> None:
        ran_at.append(now_ms())

    job = await queue.add("far", None, JobOptions(delay=60_000))
    assert job is not None
    async with Worker(queue.name, record, connection=conn, **FAST):
        await asyncio.sleep(0.1)
        assert ran_at == []
        changed_at = now_ms()
        await job.change_delay(300)
        assert job.state == "delayed"
        assert await job_state(queue, job.id) == "delayed"
        await wait_state(queue, job.id, "completed", timeout=5)
    assert len(ran_at) == 1
    assert ran_at[0] >= changed_at + 300


async def test_change_delay_to_zero_makes_the_job_waiting(queue: Queue[Any, Any]) -> None:
    job = await queue.add("far", None, JobOptions(delay=60_000))
    assert job is not None
    await job.change_delay(0)
    assert job.state == "waiting"
    counts = await queue.get_job_counts()
    assert counts.waiting == 1 and counts.delayed == 0


async def test_promote_runs_a_delayed_job_now(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        done.append(job.id)

    job = await queue.add("far", None, JobOptions(delay=60_000))
    assert job is not None
    await job.promote()
    assert job.state == "waiting"
    assert (await queue.get_job_counts()).delayed == 0
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_state(queue, job.id, "completed", timeout=5)
    assert done == [job.id]


async def test_promote_keeps_priority_of_a_delayed_prioritized_job(
    queue: Queue[Any, Any],
) -> None:
    job = await queue.add("far", None, JobOptions(delay=60_000, priority=4))
    assert job is not None
    await job.promote()
    assert job.state == "prioritized"
    counts = await queue.get_job_counts()
    assert counts.prioritized == 1 and counts.delayed == 0


async def test_job_not_started_within_ttl_fails_expired(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    expiring = await queue.add("short-lived", None, JobOptions(ttl=100, attempts=3))
    lasting = await queue.add("long-lived", None, JobOptions(ttl=60_000))
    assert expiring is not None and lasting is not None
    await asyncio.sleep(0.25)  # no worker runs: the ttl passes while the job waits
    async with Worker(queue.name, record, connection=conn, **FAST):
        expired = await wait_state(queue, expiring.id, "failed")
        await wait_state(queue, lasting.id, "completed")
    assert ran == [lasting.id]
    assert expired.failed_reason == "expired"
    assert expired.attempts_made == 1  # final despite attempts left


async def test_move_to_delayed_reschedules_without_using_an_attempt(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs: list[int] = []
    target: list[int] = []
    moved = asyncio.Event()

    async def step(job: Job[Any, str]) -> str:
        runs.append(now_ms())
        if len(runs) == 1:
            target.append(now_ms() + 300)
            moved.set()
            await job.move_to_delayed(target[0])
        return "second step"

    job = await queue.add("steps", None, JobOptions(attempts=1))
    assert job is not None
    async with Worker(queue.name, step, connection=conn, **FAST):
        await asyncio.wait_for(moved.wait(), 10)
        between = await wait_state(queue, job.id, "delayed", timeout=2)
        assert between.attempts_made == 0
        assert between.failed_reason is None
        final = await wait_state(queue, job.id, "completed", timeout=5)
    assert len(runs) == 2
    assert runs[1] >= target[0]
    assert final.attempts_made == 0
    assert final.returnvalue == "second step"
    counts = await queue.get_job_counts()
    assert counts.failed == 0 and counts.completed == 1 and counts.delayed == 0
