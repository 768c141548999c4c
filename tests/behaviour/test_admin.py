"""Managing a queue: pause/resume, remove, revoke, retry, drain, clean, obliterate, dead
letters, and closing workers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import GlideMQError, JobNotFoundError, JobStateError, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import job_state, wait_for, wait_state


async def _noop(job: Any) -> None:
    return None


async def test_queue_pause_stops_workers_until_resume(backend: Backend) -> None:
    q = backend.queue
    await q.pause()
    assert await q.is_paused() and (await q.get_job_counts()).paused
    job = await q.add("held", None)
    assert job is not None
    async with backend.worker(_noop):
        await asyncio.sleep(0.3)
        assert await job.get_state() == "waiting"
        await q.resume()
        assert not await q.is_paused()
        await wait_state(q, job.id, "completed")


async def test_worker_pause_lets_running_jobs_finish_and_takes_no_new_ones(
    backend: Backend,
) -> None:
    gate = asyncio.Event()
    started: list[int] = []
    events: list[str] = []

    async def gated(job: Any) -> None:
        started.append(job.data)
        await gate.wait()

    await backend.queue.add_bulk([("j", i) for i in range(3)])
    worker = backend.worker(gated, concurrency=1)
    worker.on("paused", lambda: events.append("paused"))
    worker.on("resumed", lambda: events.append("resumed"))
    async with worker:
        await wait_for(lambda: len(started) == 1)
        worker.pause()
        assert worker.is_paused()
        gate.set()
        await wait_for(lambda: worker.completed_count == 1)
        await asyncio.sleep(0.2)
        assert started == [0]
        worker.resume()
        await wait_for(lambda: worker.completed_count == 3)
    assert started == [0, 1, 2]
    assert events == ["paused", "resumed"]


async def test_remove_deletes_a_job_but_refuses_a_running_one(backend: Backend) -> None:
    started = asyncio.Event()

    async def hang(job: Any) -> None:
        started.set()
        await asyncio.sleep(30)

    q = backend.queue
    running = await q.add("run", None)
    waiting = await q.add("wait", None)
    delayed = await q.add("later", None, {"delay": 60_000})
    assert running and waiting and delayed
    await q.remove(delayed.id)
    assert await q.get_job(delayed.id) is None
    async with backend.worker(hang, concurrency=1, close_timeout=0.1):
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(JobStateError):
            await q.remove(running.id)
        await waiting.remove()
        assert await q.get_job(waiting.id) is None
        with pytest.raises(JobNotFoundError):
            await q.remove("no-such-job")


async def test_revoke_fails_a_waiting_job_and_aborts_a_running_one(backend: Backend) -> None:
    started = asyncio.Event()

    async def hang(job: Any) -> None:
        started.set()
        await asyncio.sleep(30)

    q = backend.queue
    running = await q.add("run", None, {"attempts": 3})
    assert running is not None
    async with backend.worker(hang, concurrency=1, lock_duration=300):
        await asyncio.wait_for(started.wait(), 10)
        waiting = await q.add("wait", None)
        assert waiting is not None
        assert await q.revoke(waiting.id) == "revoked"
        assert await q.revoke(running.id) == "flagged"
        final = await wait_state(q, running.id, "failed")
    assert final.failed_reason == "revoked" and final.revoked and final.attempts_made == 1
    gone = await q.get_job(waiting.id)
    assert gone is not None and gone.state == "failed" and gone.failed_reason == "revoked"
    assert await gone.is_revoked()
    with pytest.raises(JobStateError):
        await q.revoke(waiting.id)
    with pytest.raises(JobNotFoundError):
        await q.revoke("no-such-job")


async def test_retry_jobs_sends_failed_jobs_back_with_fresh_attempts(backend: Backend) -> None:
    fail = True

    async def until_fixed(job: Any) -> str:
        if fail:
            raise RuntimeError("broken")
        return "fixed"

    q = backend.queue
    jobs = [await q.add("j", i) for i in range(3)]
    async with backend.worker(until_fixed) as worker:
        await wait_for(lambda: worker.failed_count == 3)
        assert (await q.get_job_counts()).failed == 3
        fail = False
        assert await q.retry_jobs(count=2) == 2
        await wait_for(lambda: worker.completed_count == 2)
        assert (await q.get_job_counts()).failed == 1
        left = (await q.get_jobs("failed"))[0]
        await left.retry()
        final = await wait_state(q, left.id, "completed")
    assert final.attempts_made == 0 and final.failed_reason is None
    assert all(j is not None for j in jobs)
    with pytest.raises(ValidationError):
        await q.retry_jobs(state="waiting")
    with pytest.raises(JobStateError):
        await final.retry("failed")


async def test_drain_removes_jobs_waiting_to_run(backend: Backend) -> None:
    q = backend.queue
    await q.add_bulk([("w", 1), ("w", 2), ("p", 3, {"priority": 2})])
    kept = await q.add("d", 4, {"delay": 60_000})
    assert kept is not None
    assert await q.drain() == 3
    counts = await q.get_job_counts()
    assert (counts.waiting, counts.prioritized, counts.delayed) == (0, 0, 1)
    assert await q.drain(delayed=True) == 1
    assert await q.count() == 0
    assert await q.drain() == 0


async def test_clean_removes_finished_jobs_older_than_grace(backend: Backend) -> None:
    q = backend.queue
    await q.add_bulk([("j", i) for i in range(3)])
    async with backend.worker(_noop) as worker:
        await wait_for(lambda: worker.completed_count == 3)
    await backend.elapse(20)
    assert await q.clean(grace=3_600_000) == []
    removed = await q.clean(grace=0, limit=2)
    assert len(removed) == 2
    assert (await q.get_job_counts()).completed == 1
    assert [await q.get_job(job_id) for job_id in removed] == [None, None]
    waiting = await q.add("w", None)
    assert waiting is not None
    await backend.elapse(20)
    assert await q.clean(grace=0, state="waiting") == [waiting.id]
    with pytest.raises(ValidationError):
        await q.clean(grace=0, state="active")


async def test_obliterate_refuses_running_jobs_unless_forced(backend: Backend) -> None:
    started = asyncio.Event()

    async def hang(job: Any) -> None:
        started.set()
        await asyncio.sleep(30)

    q = backend.queue
    await q.add("run", None)
    await q.add("wait", None)
    async with backend.worker(hang, concurrency=1) as worker:
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(GlideMQError):
            await q.obliterate()
        await worker.close(force=True)
    await q.obliterate()
    assert await q.count() == 0
    assert (await q.get_job_counts()).active == 0


async def test_dead_letter_worker_parks_final_failures(backend: Backend) -> None:
    async def fails(job: Any) -> None:
        raise RuntimeError("poison")

    job = await backend.queue.add("p", None, {"attempts": 2})
    assert job is not None
    async with backend.worker(fails, dead_letter=True):
        await wait_for(lambda: backend.queue.get_dead_letter_jobs())
    parked = await backend.queue.get_dead_letter_jobs()
    assert [j.id for j in parked] == [job.id]
    assert parked[0].failed_reason == "poison" and parked[0].attempts_made == 2
    counts = await backend.queue.get_job_counts()
    assert (counts.dead_letter, counts.failed) == (1, 0)
    # get_state agrees with get_jobs and get_job_counts: the job is a dead letter
    assert await job.get_state() == "dead_letter"
    assert await job.is_failed()
    assert await backend.queue.retry_jobs(state="dead_letter") == 1
    assert await job.get_state() == "waiting"
    assert await job_state(backend.queue, job.id) == "waiting"


async def test_close_waits_for_running_jobs(backend: Backend) -> None:
    started = asyncio.Event()

    async def short(job: Any) -> str:
        started.set()
        await asyncio.sleep(0.2)
        return "done"

    job = await backend.queue.add("s", None)
    assert job is not None
    worker = backend.worker(short)
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await worker.close(timeout=10)
    assert not worker.is_running()
    assert await job_state(backend.queue, job.id) == "completed"
    await worker.close()  # idempotent


async def test_force_close_hands_running_jobs_back_to_the_queue(backend: Backend) -> None:
    started = asyncio.Event()

    async def hang(job: Any) -> None:
        started.set()
        await asyncio.sleep(30)

    async def quick(job: Any) -> str:
        return "second worker"

    job = await backend.queue.add("h", None, {"attempts": 1})
    assert job is not None
    first = backend.worker(hang)
    await first.start()
    await asyncio.wait_for(started.wait(), 10)
    await first.close(force=True)
    back = await backend.queue.get_job(job.id)
    assert back is not None and back.state == "waiting" and back.attempts_made == 0
    async with backend.worker(quick):
        final = await wait_state(backend.queue, job.id, "completed")
    assert final.returnvalue == "second worker"


async def test_get_workers_lists_the_running_workers(backend: Backend) -> None:
    async with backend.worker(_noop, concurrency=2, consumer="w-a") as a:
        async with backend.worker(_noop, concurrency=5, consumer="w-b"):
            infos = await backend.queue.get_workers()
            assert sorted((w.id, w.concurrency) for w in infos) == [("w-a", 2), ("w-b", 5)]
            assert all(w.started <= w.last_heartbeat for w in infos)

        async def only_a_left() -> bool:
            return await _ids(backend) == ["w-a"]

        await wait_for(only_a_left)
        assert a.is_running()
    assert await _ids(backend) == []


async def _ids(backend: Backend) -> list[str]:
    return sorted(w.id for w in await backend.queue.get_workers())
