"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["wait_for"]


async def wait_for(
    predicate: Callable[[], Any | Awaitable[Any]], timeout: float = 10.0, interval: float = 0.02
) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


# Worker settings that keep tests fast: promote often, wake from idle reads quickly.
FAST = {"promotion_interval": 20, "block_timeout": 500}


async def job_state(queue: Any, job_id: str) -> str | None:
    """The job's state, or None when it does not exist."""
    job = await queue.get_job(job_id)
    return None if job is None else str(job.state)


async def wait_state(queue: Any, job_id: str, state: str, timeout: float = 10) -> Any:
    """Wait until the job reaches `state`; return the job as read then."""

    async def reached() -> bool:
        return await job_state(queue, job_id) == state

    await wait_for(reached, timeout=timeout)
    job = await queue.get_job(job_id)
    assert job is not None
    return job
