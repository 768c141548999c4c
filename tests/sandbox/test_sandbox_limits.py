"""Limits: a per-job timeout kills the child; memory (RSS between jobs, RLIMIT_AS as a hard
cap) and job counts recycle it; a flood of proxied calls does not swamp the parent."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import ConnectionOptions, JobOptions, Queue
from glidemq.sandbox import SandboxOptions
from tests.helpers import wait_for

from .conftest import finished, sandboxed


@pytest.mark.parametrize("attr", ["spin", "spin_async"])
async def test_timeout_kills_the_child_and_fails_the_job(
    attr: str, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    hung = await queue.add("hang", None, JobOptions(timeout=300, attempts=2))
    assert hung is not None
    async with sandboxed(queue, attr, conn) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        job = await finished(queue, hung.id)
        assert job.state == "failed" and job.failed_reason == "timeout"
        assert job.attempts_made == 2  # retried per its attempts, timed out again
        assert pool.counters["timeouts"] == 2 and pool.counters["killed"] == 2
        await wait_for(lambda: pool.stats()["ready"] == 1)  # replaced
        assert pool.counters["started"] == 3


async def test_default_timeout_from_the_options(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    hung = await queue.add("hang", {"seconds": 30})
    assert hung is not None
    async with sandboxed(queue, "slow_sync", conn, sandbox=SandboxOptions(timeout=200)):
        job = await finished(queue, hung.id)
    assert job.failed_reason == "timeout"


async def test_memory_leak_recycles_the_child_between_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("leak", {"mb": 40}) for _ in range(8)])
    options = SandboxOptions(max_memory_per_child_mb=150)
    async with sandboxed(queue, "leak", conn, sandbox=options) as worker:
        await wait_for(lambda: worker.completed_count == 8, timeout=20)
        pool = worker.sandbox_pool
        assert pool is not None
        assert pool.counters["recycled_memory"] >= 2, pool.stats()
        assert pool.counters["crashed"] == 0
    jobs = await queue.get_jobs(["completed"])
    assert len({j.returnvalue for j in jobs}) >= 3  # several children took turns


async def test_hard_memory_cap_fails_the_job_with_memory_error(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("hog", {"mb": 2048})
    assert added is not None
    options = SandboxOptions(max_memory_per_child_mb=100)  # RLIMIT_AS: start size + 200 MiB
    async with sandboxed(queue, "hog", conn, sandbox=options) as worker:
        job = await finished(queue, added.id)
        assert job.state == "failed" and job.failed_reason == "MemoryError"
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.counters["recycled_memory"] == 1)


async def test_max_jobs_per_child_recycles_between_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("e", i) for i in range(12)])
    options = SandboxOptions(max_jobs_per_child=3)
    async with sandboxed(queue, "echo", conn, sandbox=options) as worker:
        await wait_for(lambda: worker.completed_count == 12)
        pool = worker.sandbox_pool
        assert pool is not None and pool.counters["recycled_jobs"] == 4
    jobs = await queue.get_jobs(["completed"])
    pids = [j.returnvalue["pid"] for j in jobs]
    assert len(set(pids)) == 4 and all(pids.count(p) == 3 for p in set(pids))


async def test_progress_flood_is_absorbed(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    flood = await queue.add("flood", {"n": 1500})
    assert flood is not None
    errors: list[BaseException] = []
    async with sandboxed(queue, "progress_flood", conn) as worker:
        worker.on("error", errors.append)
        job = await finished(queue, flood.id, timeout=60)
    assert job.state == "completed", job.failed_reason
    assert job.returnvalue == 1500 and job.progress == 1500
    assert errors == []  # no "maximum inflight requests" from the parent's client


async def test_timeout_on_a_shared_child_fails_the_jobs_it_was_running(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    slow = await queue.add("slow", {"seconds": 5})
    hung = await queue.add("hang", {"hang": True}, JobOptions(timeout=300))
    assert slow is not None and hung is not None
    options = SandboxOptions(max_children=1)
    async with sandboxed(queue, "slow_or_hang", conn, concurrency=2, sandbox=options):
        timed_out = await finished(queue, hung.id)
        bystander = await finished(queue, slow.id)
    assert timed_out.failed_reason == "timeout"
    assert "was killed: job" in (bystander.failed_reason or "")
    assert "timed out" in (bystander.failed_reason or "")
