"""The result cache: `get_result` after the job record is gone, until the result ttl ends."""

from __future__ import annotations

from typing import Any

from tests.behaviour.conftest import Backend
from tests.helpers import wait_for

# Long enough that a slow shared machine reads the result before it expires.
_TTL = 3000


async def _double(job: Any) -> int:
    return int(job.data["n"]) * 2


async def _fail(job: Any) -> None:
    raise RuntimeError("no")


async def test_get_result_outlives_remove_on_complete_until_the_ttl(backend: Backend) -> None:
    job = await backend.queue.add(
        "calc", {"n": 21}, {"remove_on_complete": True, "result_ttl": _TTL}
    )
    assert job is not None
    assert await backend.queue.get_result(job.id) is None  # not finished yet
    async with backend.worker(_double) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert await backend.queue.get_job(job.id) is None
    assert await backend.queue.get_result(job.id) == 42
    await backend.elapse(_TTL + 300)
    assert await backend.queue.get_result(job.id) is None


async def test_get_result_reads_a_kept_record_and_ignores_failures(backend: Backend) -> None:
    kept = await backend.queue.add("calc", {"n": 1})
    assert kept is not None
    async with backend.worker(_double) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert await backend.queue.get_result(kept.id) == 2  # no result ttl: from the record
    failed = await backend.queue.add("calc", {"n": 2}, {"result_ttl": _TTL})
    assert failed is not None
    async with backend.worker(_fail) as worker:
        await wait_for(lambda: worker.failed_count == 1)
    assert await backend.queue.get_result(failed.id) is None
    assert await backend.queue.get_result("no-such-job") is None


async def test_a_cached_result_makes_the_same_custom_id_a_duplicate(backend: Backend) -> None:
    opts = {"job_id": "order-7", "remove_on_complete": True, "result_ttl": _TTL}
    assert await backend.queue.add("calc", {"n": 5}, opts) is not None
    async with backend.worker(_double) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert await backend.queue.add("calc", {"n": 6}, opts) is None  # outcome still cached
    assert await backend.queue.get_result("order-7") == 10
    await backend.elapse(_TTL + 300)
    again = await backend.queue.add("calc", {"n": 6}, opts)
    assert again is not None and again.id == "order-7"
