"""Pipelining: a child holds runs queued behind the one it runs. Only a started run can fail
with its child; a queued run is sent elsewhere without using an attempt, its timeout counts
from its own start, a long job gives back what waits behind it, and pipelining stops while
runs are long."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, JobOptions, Queue
from glidemq.client.context import QueueContext
from glidemq.keys import QueueKeys
from glidemq.sandbox import SandboxOptions, SandboxPool
from tests.helpers import wait_for

from .conftest import PROCS, finished, sandboxed

NO_TAKE_BACK = 30.0  # a pipeline_window no test outlasts: queued runs stay where they are


def _jobs(*data: Any) -> list[Job[Any, Any]]:
    """Jobs for SandboxPool.run without a queue (the pool only sends their fields)."""
    ctx = QueueContext(None, QueueKeys("pipeline"))  # type: ignore[arg-type]  # never used
    return [Job.created(ctx, str(i), "p", d, {}, 0, 0, 0, 1) for i, d in enumerate(data)]


async def _pool(attr: str, options: SandboxOptions, slots: int = 1) -> SandboxPool:
    pool = SandboxPool(f"{PROCS}:{attr}", options, slots=slots)
    await pool.start()
    await wait_for(lambda: pool.stats()["ready"] == pool.size)
    return pool


@pytest.mark.parametrize("attr", ["maybe_crash", "maybe_crash_sync"])
async def test_crash_fails_the_running_job_and_requeues_the_queued_one(
    attr: str, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    crasher, behind = await queue.add_bulk(
        # the crash waits until the job behind it is queued (the worker takes it once the
        # child has started a run)
        [("c", {"n": 0, "crash": "exit", "delay": 0.3}), ("c", {"n": 1, "crash": None})]
    )
    assert crasher is not None and behind is not None
    options = SandboxOptions(pipeline=1, pipeline_window=NO_TAKE_BACK)
    async with sandboxed(queue, attr, conn, concurrency=1, sandbox=options) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        crashed = await finished(queue, crasher.id)
        done = await finished(queue, behind.id)
        assert pool.counters["crashed"] == 1
        assert pool.counters["requeued"] == 1  # it was queued behind the crash, not run
    assert crashed.state == "failed" and crashed.attempts_made == 1
    assert "exited with code 13 while running the job" in (crashed.failed_reason or "")
    # One attempt allowed: had the crash counted against it, it would have failed.
    assert done.state == "completed" and done.returnvalue == 1 and done.attempts_made == 0


async def test_a_queued_run_times_out_from_its_own_start(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    first, second, third = await queue.add_bulk(
        [
            ("s", {"seconds": 0.5}, JobOptions(timeout=5000)),
            # waits ~0.5 s queued, runs 0.3 s: over 0.6 s only if its wait counted
            ("s", {"seconds": 0.3}, JobOptions(timeout=600)),
            ("s", {"seconds": 10}, JobOptions(timeout=300)),
        ]
    )
    assert first is not None and second is not None and third is not None
    options = SandboxOptions(pipeline=2, pipeline_window=NO_TAKE_BACK)
    async with sandboxed(queue, "slow", conn, concurrency=1, sandbox=options) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        assert (await finished(queue, first.id)).state == "completed"
        assert (await finished(queue, second.id)).state == "completed"
        timed_out = await finished(queue, third.id)
        assert timed_out.state == "failed" and timed_out.failed_reason == "timeout"
        assert pool.counters["timeouts"] == 1


async def test_a_long_job_gives_back_the_runs_queued_behind_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    options = SandboxOptions(pipeline=1)  # default window: 20 ms
    async with sandboxed(queue, "slow", conn, concurrency=2, sandbox=options) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.stats()["ready"] == 2)
        added = await queue.add_bulk(
            [("s", {"seconds": s}) for s in (2.0, 0.1, 0.0, 0.0)]  # both children busy first
        )
        ids = [a.id for a in added if a is not None]
        jobs = [await finished(queue, job_id) for job_id in ids]
        assert pool.counters["requeued"] >= 1  # the run queued behind the long job moved
    long_job, *short = jobs
    assert all(j.state == "completed" for j in jobs)
    assert all((j.finished_on or 0) < (long_job.finished_on or 0) for j in short)


async def test_revoking_a_queued_job_leaves_the_running_one_alone(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    running, queued = await queue.add_bulk([("s", {"seconds": 2.0}), ("s", {"seconds": 30})])
    assert running is not None and queued is not None
    options = SandboxOptions(pipeline=1, pipeline_window=NO_TAKE_BACK)
    async with sandboxed(
        queue, "slow", conn, concurrency=1, sandbox=options, lock_duration=900
    ) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.stats()["queued"] == 1)
        pids = pool.pids
        assert await queue.revoke(queued.id) == "flagged"  # the heartbeat aborts it
        revoked = await finished(queue, queued.id)
        assert revoked.state == "failed" and revoked.failed_reason == "revoked"
        done = await finished(queue, running.id)
        assert done.state == "completed"
        assert pool.counters["killed"] == 0 and pool.pids == pids


async def test_a_child_over_its_memory_limit_gives_back_its_queued_runs() -> None:
    # Three runs reach the single child in one frame; the first pushes it over the limit.
    options = SandboxOptions(max_children=1, pipeline=2, max_memory_per_child_mb=60)
    pool = await _pool("leak", options)
    try:
        pids = await asyncio.gather(*(pool.run(j) for j in _jobs({"mb": 40}, {"mb": 1}, {})))
        assert pool.counters["recycled_memory"] >= 1 and pool.counters["crashed"] == 0
        assert pool.counters["requeued"] >= 1
        assert pids[0] != pids[1]  # the runs behind the first went to the next child
    finally:
        await pool.close()


async def test_long_runs_turn_pipelining_off_and_short_ones_back_on() -> None:
    options = SandboxOptions(max_children=1, pipeline=2)
    pool = await _pool("slow", options)
    try:
        assert pool.pipeline_depth == 1  # nothing timed yet: one queued run per child
        for job in _jobs(*({"seconds": 0.1} for _ in range(3))):
            await pool.run(job)
        assert pool.pipeline_depth == 0 and pool.pipeline_slots == 0
        for job in _jobs(*({"seconds": 0} for _ in range(40))):
            await pool.run(job)
        assert pool.pipeline_depth == 2
    finally:
        await pool.close()


async def test_the_queue_depth_holds_about_one_window_of_work() -> None:
    pool = await _pool("slow", SandboxOptions(max_children=1))  # depth 16, window 20 ms
    try:
        for job in _jobs(*({"seconds": 0.005} for _ in range(20))):
            await pool.run(job)
        assert 1 <= pool.pipeline_depth <= 4  # runs take 5 ms and more here
        for job in _jobs(*({"seconds": 0} for _ in range(40))):
            await pool.run(job)
        assert pool.pipeline_depth > 4
    finally:
        await pool.close()


async def test_runs_stuck_behind_long_jobs_go_back_to_the_queue(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    # Short jobs keep both children moving, so runs queue behind them; then both start a
    # long job, and what queued behind those must not wait in this worker.
    specs = [("s", {"seconds": 0}) for _ in range(200)]
    specs += [("s", {"seconds": 1.5}), ("s", {"seconds": 1.5})]
    specs += [("s", {"seconds": 0}) for _ in range(6)]
    options = SandboxOptions(pipeline=4)
    async with sandboxed(queue, "slow", conn, concurrency=2, sandbox=options) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.stats()["ready"] == 2)
        added = [a for a in await queue.add_bulk(specs) if a is not None]
        long_ids = [a.id for a in added[200:202]]

        async def both_long_running() -> bool:
            jobs = [await queue.get_job(i) for i in long_ids]
            return all(j is not None and j.state == "active" for j in jobs)

        await wait_for(both_long_running, interval=0.01)
        # The worker holds only what its children run: the rest waits in the queue.
        await wait_for(lambda: _active_is(queue, 2), timeout=1.0, interval=0.01)
        jobs = [await finished(queue, a.id) for a in added]
        assert pool.counters["crashed"] == 0
    assert all(j.state == "completed" and j.attempts_made == 0 for j in jobs)


async def _active_is(queue: Queue[Any, Any], n: int) -> bool:
    return (await queue.get_job_counts()).active == n


async def test_a_worker_holds_no_more_than_its_concurrency_while_jobs_are_long(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("s", {"seconds": 0.3}) for _ in range(6)])
    options = SandboxOptions(pipeline=2)
    async with sandboxed(queue, "slow", conn, concurrency=1, sandbox=options) as worker:
        await wait_for(lambda: worker.completed_count >= 4, timeout=15)
        counts = await queue.get_job_counts()
        assert counts.active == 1  # 3 at the start (1 + pipeline 2), 1 once runs are long
