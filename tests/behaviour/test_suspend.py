"""Suspend and signal: a job waits in state `suspended` until a signal re-queues it (its next
run sees the signal) or its timeout fails it. The same on standalone Valkey, the cluster and
in memory."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import JobStateError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for


async def _review(job: Any) -> Any:
    if not job.signals:
        await job.suspend(reason="awaiting review", timeout_ms=job.data)
    return [(s.name, s.data) for s in job.signals]


async def _state(q: Any, job_id: str) -> str | None:
    job = await q.get_job(job_id)
    return job.state if job else None


async def test_a_signal_resumes_the_job_with_the_signal(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("review", None)
    async with backend.worker(_review):

        async def parked() -> bool:
            return await _state(q, job.id) == "suspended"

        await wait_for(parked, timeout=20)
        assert (await q.get_job_counts()).suspended == 1
        assert await q.get_suspended_count() == 1
        assert [j.id for j in await q.get_suspended()] == [job.id]
        assert await q.signal(job.id, "approve", {"ok": True}) == "waiting"
        assert await job.wait_until_finished(timeout=20) == "completed"
    assert job.returnvalue == [["approve", {"ok": True}]]
    assert [s.name for s in job.signals] == ["approve"]
    assert await q.get_suspended() == []
    with pytest.raises(JobStateError):
        await q.signal(job.id, "again")


async def test_an_expired_suspension_fails_the_job(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("review", 200)
    async with backend.worker(_review):

        async def parked() -> bool:
            return await _state(q, job.id) == "suspended"

        await wait_for(parked, timeout=20)
        await backend.elapse(400)
        assert await job.wait_until_finished(timeout=20) == "failed"
    assert job.failed_reason == "suspension timed out: awaiting review"
    assert (await q.get_job_counts()).suspended == 0


async def test_a_removed_suspended_job_leaves_the_suspended_index(backend: Backend) -> None:
    q = backend.queue
    jobs = [await q.add("review", None) for _ in range(2)]
    async with backend.worker(_review, concurrency=2):

        async def parked() -> bool:
            return await q.get_suspended_count() == 2

        await wait_for(parked, timeout=20)
    for job in jobs:
        await q.remove(job.id)
    assert await q.get_suspended() == []
    assert await q.get_suspended_count() == 0
    assert (await q.get_job_counts()).suspended == 0


async def test_a_revoked_suspended_job_leaves_the_suspended_index(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("review", None)
    async with backend.worker(_review):
        await wait_for(lambda: q.get_suspended_count(), timeout=20)
    assert await q.revoke(job.id) == "revoked"
    assert await q.get_suspended_count() == 0
    assert await _state(q, job.id) == "failed"
