"""Revoking a running job reaches the child: the processor's task is cancelled (or, if it
cannot be, the child is killed) and the job ends as revoked. Closing the worker hands
running jobs back."""

from __future__ import annotations

import asyncio
from typing import Any

import psutil

from glidemq import ConnectionOptions, Queue, Worker
from glidemq.sandbox import SandboxOptions, SandboxPool
from tests.helpers import wait_for

from .conftest import finished, sandboxed


async def _running(worker: Worker[Any, Any]) -> SandboxPool:
    """The worker's pool once a child runs the job."""
    pool = worker.sandbox_pool
    assert pool is not None
    await wait_for(lambda: pool.stats()["busy"] == 1)
    return pool


async def test_revoke_cancels_the_task_in_the_child(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("slow", {"seconds": 30})
    assert added is not None
    async with sandboxed(queue, "slow", conn, lock_duration=1500) as worker:
        pool = await _running(worker)
        pid = pool.pids[0]
        assert await queue.revoke(added.id) == "flagged"  # the heartbeat aborts it
        job = await finished(queue, added.id)
        assert job.state == "failed" and job.failed_reason == "revoked"
        await wait_for(lambda: pool.stats()["busy"] == 0)
        assert pool.counters["aborted"] == 1 and pool.counters["killed"] == 0
        assert pool.pids == [pid]  # the child cancelled the task and lives on


async def test_abort_ignored_by_a_sync_processor_kills_the_child(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("slow", {"seconds": 30})
    assert added is not None
    options = SandboxOptions(abort_grace=0.3)
    async with sandboxed(queue, "slow_sync", conn, sandbox=options) as worker:
        pool = await _running(worker)
        pid = pool.pids[0]
        assert worker.abort_job(added.id)
        job = await finished(queue, added.id)
        assert job.failed_reason == "revoked"
        await wait_for(lambda: not psutil.pid_exists(pid) or _zombie(pid))
        await wait_for(lambda: pool.stats()["ready"] == 1)
        assert pool.counters["killed"] == 1 and pool.pids != [pid]


async def test_close_hands_running_jobs_back(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("slow", {"seconds": 30})
    assert added is not None
    worker = sandboxed(queue, "slow", conn, close_timeout=0.2)
    await worker.start()
    pool = await _running(worker)
    pids = pool.pids
    await asyncio.wait_for(worker.close(), 10)
    job = await queue.get_job(added.id)
    assert job is not None and job.state == "waiting"  # back in the queue, not failed
    assert pool.state == "closed" and pool.pids == []
    assert all(not psutil.pid_exists(p) for p in pids)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
