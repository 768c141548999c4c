"""Suspend and signal: a running job parks itself in state `suspended`, a signal re-queues
it with the signal in `job.signals`, an expired suspension fails it (swept by workers and by
the Queue), counts and events show the state. Standalone and cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    Job,
    JobNotFoundError,
    JobStateError,
    Queue,
    QueueEvents,
    Signal,
    ValidationError,
    Worker,
)
from tests.helpers import FAST, wait_for

runs: dict[str, list[list[Signal]]] = {}


async def approval(job: Job[Any, Any]) -> Any:
    """Asks for approval on its first run; finishes with the decision on the next."""
    runs.setdefault(f"{job.queue_name}:{job.id}", []).append(list(job.signals))
    if not job.signals:
        await job.suspend(reason="needs approval", timeout_ms=job.data.get("timeout"))
    return {"decision": job.signals[-1].data, "by": job.signals[-1].name}


async def state_of(queue: Queue[Any, Any], job_id: str) -> str | None:
    job = await queue.get_job(job_id)
    return job.state if job else None


async def test_a_signal_wakes_a_suspended_job_which_sees_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    events = QueueEvents(queue.name, connection=conn, block_timeout=100)
    await events.start()
    try:
        job = await queue.add("review", {}, {"attempts": 1})
        async with Worker(queue.name, approval, connection=conn, **FAST):

            async def suspended() -> bool:
                return await state_of(queue, job.id) == "suspended"

            await wait_for(suspended, timeout=20)
            counts = await queue.get_job_counts()
            assert counts.suspended == 1 and counts.active == 0 and counts.waiting == 0
            listed = await queue.get_suspended()
            assert [j.id for j in listed] == [job.id]
            assert listed[0].attempts_made == 0  # a suspension is not a failed attempt
            with pytest.raises(JobStateError):
                await job.retry()
            state = await queue.signal(job.id, "alice", {"approved": True})
            assert state == "waiting"
            assert await job.wait_until_finished(timeout=20) == "completed"
        assert job.returnvalue == {"decision": {"approved": True}, "by": "alice"}
        assert [len(r) for r in runs[f"{queue.name}:{job.id}"]] == [0, 1]
        assert job.signals[0].name == "alice" and job.signals[0].at > 0
        assert (await queue.get_job_counts()).suspended == 0
        seen: list[str] = []
        while True:
            ev = await events.next(timeout=5)
            if ev.job_id == job.id:
                seen.append(ev.event)
            if ev.event == "completed" and ev.job_id == job.id:
                break
        assert seen.index("suspended") < seen.index("signaled") < seen.index("completed")
        # a job that is not suspended (any more) refuses a signal
        with pytest.raises(JobStateError):
            await queue.signal(job.id, "bob", None)
        with pytest.raises(JobNotFoundError):
            await queue.signal("no-such-job", "bob", None)
        with pytest.raises(ValidationError):
            await queue.signal(job.id, "", None)
        with pytest.raises(ValidationError):
            await queue.signal(job.id, "x", {1, 2})
    finally:
        await events.close()


async def test_an_expired_suspension_fails_the_job_with_a_clear_reason(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("review", {"timeout": 300})
    async with Worker(queue.name, approval, connection=conn, **FAST):
        # the worker's promotion pass sweeps expired suspensions
        assert await job.wait_until_finished(timeout=20) == "failed"
    assert job.failed_reason == "suspension timed out: needs approval"
    assert await queue.get_suspended() == []
    with pytest.raises(JobStateError):
        await queue.signal(job.id, "late", True)


async def test_the_queue_sweeps_expired_suspensions_without_a_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("review", {"timeout": 200})
    async with Worker(queue.name, approval, connection=conn, **FAST):

        async def suspended() -> bool:
            return await state_of(queue, job.id) == "suspended"

        await wait_for(suspended, timeout=20)
    await asyncio.sleep(0.3)
    assert await queue.get_suspended() == []  # swept by this call
    assert await state_of(queue, job.id) == "failed"


async def test_suspend_outside_a_run_and_bad_arguments_are_refused(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("review", {})
    with pytest.raises(JobStateError):
        await job.suspend("not running")
    failures: list[str] = []

    async def bad(j: Job[Any, Any]) -> None:
        for kwargs in ({"timeout_ms": -1}, {"timeout_ms": 1.5}, {"reason": 3}):
            try:
                await j.suspend(**kwargs)
            except ValidationError as exc:
                failures.append(exc.field)

    async with Worker(queue.name, bad, connection=conn, **FAST):
        assert await job.wait_until_finished(timeout=20) == "completed"
    assert failures == ["timeout_ms", "timeout_ms", "reason"]
