"""Deduplication modes and retention of finished jobs."""

from __future__ import annotations

from typing import Any

from glidemq import KeepJobs
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state


async def _noop(job: Any) -> str:
    return "ok"


async def _fail(job: Any) -> None:
    raise RuntimeError("no")


async def test_dedup_simple_skips_while_the_first_job_is_unfinished(backend: Backend) -> None:
    opts = {"deduplication": {"id": "user-1"}}
    first = await backend.queue.add("sync", 1, opts)
    assert first is not None
    assert await backend.queue.add("sync", 2, opts) is None
    assert await backend.queue.count() == 1
    async with backend.worker(_noop):
        await wait_state(backend.queue, first.id, "completed")
    again = await backend.queue.add("sync", 3, opts)
    assert again is not None and again.id != first.id


async def test_dedup_throttle_skips_within_the_ttl(backend: Backend) -> None:
    opts = {"deduplication": {"id": "t", "mode": "throttle", "ttl": 300}}
    first = await backend.queue.add("ping", 1, opts)
    assert first is not None
    assert await backend.queue.add("ping", 2, opts) is None
    await backend.elapse(350)
    later = await backend.queue.add("ping", 3, opts)
    assert later is not None and later.id != first.id
    assert await backend.queue.count() == 2


async def test_dedup_debounce_replaces_the_delayed_job(backend: Backend) -> None:
    opts = {"delay": 60_000, "deduplication": {"id": "doc-7", "mode": "debounce"}}
    first = await backend.queue.add("reindex", {"v": 1}, opts)
    second = await backend.queue.add("reindex", {"v": 2}, opts)
    assert first is not None and second is not None
    assert await backend.queue.get_job(first.id) is None
    newest = await backend.queue.get_job(second.id)
    assert newest is not None and newest.data == {"v": 2} and newest.state == "delayed"
    assert (await backend.queue.get_job_counts()).delayed == 1


async def test_remove_on_complete_true_deletes_the_job(backend: Backend) -> None:
    job = await backend.queue.add("x", None, {"remove_on_complete": True})
    assert job is not None
    async with backend.worker(_noop) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert await backend.queue.get_job(job.id) is None
    assert (await backend.queue.get_job_counts()).completed == 0


async def test_worker_retention_keeps_the_newest_completed_jobs(backend: Backend) -> None:
    jobs = await backend.queue.add_bulk([("j", i) for i in range(5)])
    async with backend.worker(_noop, remove_on_complete=2) as worker:
        await wait_for(lambda: worker.completed_count == 5)
    kept = await backend.queue.get_jobs("completed")
    assert len(kept) == 2
    assert {j.id for j in kept} <= {j.id for j in jobs if j is not None}


async def test_job_retention_overrides_the_worker_default(backend: Backend) -> None:
    keep = await backend.queue.add("keep", None, {"remove_on_fail": False})
    drop = await backend.queue.add("drop", None)
    assert keep is not None and drop is not None
    async with backend.worker(_fail, remove_on_fail=True) as worker:
        await wait_for(lambda: worker.failed_count == 2)
    assert await backend.queue.get_job(drop.id) is None
    kept = await backend.queue.get_job(keep.id)
    assert kept is not None and kept.state == "failed"


async def test_keep_jobs_age_drops_older_finished_jobs(backend: Backend) -> None:
    old = await backend.queue.add("old", None, {"remove_on_complete": KeepJobs(age=1)})
    assert old is not None
    async with backend.worker(_noop) as worker:
        await wait_for(lambda: worker.completed_count == 1)
        await backend.elapse(1100)
        new = await backend.queue.add("new", None, {"remove_on_complete": KeepJobs(age=1)})
        assert new is not None
        await wait_for(lambda: worker.completed_count == 2)
    assert await backend.queue.get_job(old.id) is None
    assert [j.id for j in await backend.queue.get_jobs("completed")] == [new.id]
