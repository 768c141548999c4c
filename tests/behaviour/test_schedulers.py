"""Job schedulers: interval and cron schedules fired by running workers, one job per run,
until a limit; upsert, list and remove. The same on standalone Valkey, the cluster and in
memory (there on the manual clock)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for


def _run_time(job_id: str) -> int:
    return int(job_id.rsplit("-", 1)[1])


async def test_an_interval_scheduler_adds_one_job_per_run_until_its_limit(
    backend: Backend,
) -> None:
    q = backend.queue
    seen: list[Any] = []

    async def record(job: Any) -> None:
        seen.append(job)

    s = await q.upsert_job_scheduler(
        "heartbeat",
        every_ms=400,
        limit=3,
        template={"name": "ping", "data": {"source": "scheduler"}, "opts": {"attempts": 2}},
    )
    assert s.count == 0 and s.last_run is None
    async with backend.worker(record):
        for n in (1, 2, 3):
            await wait_for(lambda n=n: len(seen) == n)
            await backend.elapse(400)
    assert [j.name for j in seen] == ["ping"] * 3
    assert all(j.id.startswith("repeat-heartbeat-") for j in seen)
    assert all(j.data == {"source": "scheduler"} and j.max_attempts == 2 for j in seen)
    runs = [_run_time(j.id) for j in seen]
    assert runs == [runs[0], runs[0] + 400, runs[0] + 800]  # on the grid of the first run
    assert await q.get_job_scheduler("heartbeat") is None  # the limit removed it


async def test_a_cron_scheduler_fires_on_its_times_and_can_be_listed_and_removed(
    backend: Backend,
) -> None:
    q = backend.queue
    seen: list[str] = []

    async def record(job: Any) -> None:
        seen.append(job.id)

    before = backend.now_ms()  # the next run follows the upsert, which may end past it
    every_2s = await q.upsert_job_scheduler("tick", cron="*/2 * * * * *")
    daily = await q.upsert_job_scheduler("daily", cron="30 9 * * mon-fri", tz="Europe/Berlin")
    assert every_2s.next_run % 2000 == 0 and every_2s.next_run > before
    assert daily.next_run > every_2s.next_run
    again = await q.upsert_job_scheduler("tick", cron="*/2 * * * * *")
    assert again.next_run == every_2s.next_run  # an unchanged schedule keeps its next run
    assert [s.name for s in await q.get_job_schedulers()] == ["tick", "daily"]
    async with backend.worker(record):
        await backend.elapse(max(0, every_2s.next_run - backend.now_ms()))
        await wait_for(lambda: len(seen) == 1)
        await backend.elapse(2000)
        await wait_for(lambda: len(seen) == 2)
    runs = [_run_time(i) for i in seen]
    assert runs[0] == every_2s.next_run and all(r % 2000 == 0 for r in runs)
    assert runs[1] > runs[0]
    tick = await q.get_job_scheduler("tick")
    assert tick is not None and tick.count >= 2 and tick.last_run is not None
    assert await q.remove_job_scheduler("tick") is True
    assert await q.remove_job_scheduler("tick") is False
    assert [s.name for s in await q.get_job_schedulers()] == ["daily"]


async def test_bad_schedules_are_refused(backend: Backend) -> None:
    q = backend.queue
    with pytest.raises(ValidationError) as err:
        await q.upsert_job_scheduler("bad", cron="0 0 30 2 *")
    assert err.value.field == "cron"
    with pytest.raises(ValidationError):
        await q.upsert_job_scheduler("both", cron="* * * * *", every_ms=10)
    with pytest.raises(ValidationError):
        await q.upsert_job_scheduler("id", every_ms=10, template={"opts": {"job_id": "x"}})
    assert await q.get_job_schedulers() == []


async def test_repeat_after_complete_plans_the_next_run_when_the_last_job_finished(
    backend: Backend,
) -> None:
    q = backend.queue
    gate = asyncio.Event()
    started: list[str] = []

    async def slow_first(job: Any) -> None:
        started.append(job.id)
        if len(started) == 1:
            await gate.wait()

    s = await q.upsert_job_scheduler(
        "sync", every_ms=300, limit=3, repeat_after_complete=True, template={"name": "sync"}
    )
    assert s.repeat_after_complete and s.awaiting is None
    async with backend.worker(slow_first, concurrency=4):
        await backend.elapse(max(0, s.next_run - backend.now_ms()))
        await wait_for(lambda: len(started) == 1)
        await backend.elapse(1000)  # three intervals pass while the first job runs
        assert started == [started[0]]  # no overlapping run was added
        waiting = await q.get_job_scheduler("sync")
        assert waiting is not None and waiting.awaiting == started[0] and waiting.count == 1
        gate.set()
        await wait_for(lambda: _finished(q, started[0]))
        first = await q.get_job(started[0])
        assert first is not None and first.finished_on is not None
        await backend.elapse(300)
        await wait_for(lambda: len(started) == 2)
        assert _run_time(started[1]) == first.finished_on + 300
        await backend.elapse(300)
        await wait_for(lambda: len(started) == 3)
    assert _run_time(started[2]) >= _run_time(started[1]) + 300
    assert await q.get_job_scheduler("sync") is None  # the limit still removes it


async def _finished(q: Any, job_id: str) -> bool:
    job = await q.get_job(job_id)
    return job is not None and job.state == "completed"


async def test_repeat_after_complete_must_be_a_bool(backend: Backend) -> None:
    with pytest.raises(ValidationError) as info:
        await backend.queue.upsert_job_scheduler("x", every_ms=100, repeat_after_complete="yes")
    assert info.value.field == "repeat_after_complete"
