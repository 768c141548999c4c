"""Batch mode in the sandbox: a batch is one run in one child, one IPC round trip."""

from __future__ import annotations

from typing import Any

from glidemq import BatchOptions, ConnectionOptions, Queue
from tests.helpers import wait_for

from .conftest import sandboxed


async def test_batch_is_one_round_trip(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    await queue.add_bulk([("b", i) for i in range(40)])
    batch = BatchOptions(size=10, timeout_ms=20)
    async with sandboxed(queue, "batch_double", conn, batch=batch, concurrency=2) as worker:
        await wait_for(lambda: worker.completed_count == 40)
        pool = worker.sandbox_pool
        assert pool is not None and pool.size == 2  # children count batches in flight
        assert pool.counters["runs"] <= 8  # 4 full batches; a few partial ones at most
    jobs = await queue.get_jobs(["completed"])
    assert sorted(j.returnvalue["value"] for j in jobs) == [2 * i for i in range(40)]


async def test_batch_error_fails_only_its_items(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("b", i) for i in range(10)])
    batch = BatchOptions(size=10, timeout_ms=50)
    async with sandboxed(queue, "batch_partial", conn, batch=batch) as worker:
        await wait_for(lambda: worker.completed_count + worker.failed_count == 10)
        assert worker.completed_count == 5 and worker.failed_count == 5
    failed = await queue.get_jobs(["failed"])
    assert sorted(j.failed_reason or "" for j in failed) == [f"odd {i}" for i in (1, 3, 5, 7, 9)]
