"""Job schedulers: upsert / get / remove, and firing from workers exactly once per run."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from glidemq import (
    ConnectionOptions,
    Job,
    JobOptions,
    JobTemplate,
    PayloadTooLargeError,
    Queue,
    ValidationError,
    Worker,
)
from glidemq.client.context import now_ms
from glidemq.queue.schedulers import SchedulerRunner
from tests.helpers import FAST, wait_for

_PLAIN_LIMITS = ("", "0", "0", "0", "0", "0", "0", "0", "", "")  # addJob args 9-17 and lifo


def _run_of(job_id: str, scheduler: str) -> int:
    """The run time encoded in a scheduler job's id (repeat-<scheduler>-<ms>)."""
    prefix = f"repeat-{scheduler}-"
    assert job_id.startswith(prefix), job_id
    return int(job_id[len(prefix) :])


async def test_competing_workers_fire_each_run_exactly_once(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    every, runs = 400, 20
    start = now_ms() + 1500  # all four workers are up before the first run
    await queue.upsert_job_scheduler(
        "tick", every_ms=every, start_date=start, template={"name": "t", "data": {"k": 1}}
    )
    seen: Counter[str] = Counter()
    by_worker: Counter[int] = Counter()

    def recorder(i: int) -> Any:
        async def record(job: Job[Any, None]) -> None:
            seen[job.id] += 1
            by_worker[i] += 1

        return record

    async with AsyncExitStack() as stack:
        for i in range(4):
            w: Worker[Any, None] = Worker(queue.name, recorder(i), connection=conn, **FAST)
            await stack.enter_async_context(w)
        await wait_for(lambda: len(seen) >= runs, timeout=start / 1000 - now_ms() / 1000 + 20)
        await queue.remove_job_scheduler("tick")
    ticks = sorted(_run_of(job_id, "tick") for job_id in seen)
    assert ticks[:runs] == [start + i * every for i in range(runs)]  # no run missed
    assert all(n == 1 for n in seen.values()), "a job ran twice"
    assert len(set(ticks)) == len(ticks)
    done = await queue.get_jobs("completed")
    assert sorted(j.id for j in done) == sorted(seen)
    assert all(j.name == "t" and j.data == {"k": 1} for j in done)


async def test_fire_is_compare_and_set_across_connections(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.upsert_job_scheduler("cas", every_ms=60_000, template={"data": 7})
    queues = [Queue(queue.name, connection=conn) for _ in range(4)]
    errors: list[BaseException] = []
    try:
        ctxs = [await q._context() for q in queues]
        runners = [SchedulerRunner(errors.append) for _ in ctxs]
        now = now_ms()
        # the same due run seen by four processes at once
        nexts = await asyncio.gather(
            *(r.fire_due(c, now) for r, c in zip(runners, ctxs, strict=True))
        )
    finally:
        for q in queues:
            await q.close()
    assert errors == []
    s = await queue.get_job_scheduler("cas")
    assert s is not None and s.count == 1 and s.last_run is not None
    assert s.next_run == s.last_run + 60_000
    # the firing caller reports the new next run; a caller that lost the race reports
    # nothing, and one whose read came after the fire sees the new entry, not due yet
    assert set(nexts) <= {s.next_run, None} and s.next_run in nexts
    jobs = await queue.get_jobs("waiting")
    assert [j.id for j in jobs] == [s.job_id(s.last_run)]
    assert jobs[0].name == "cas" and jobs[0].data == 7


async def test_stale_fire_changes_nothing(queue: Queue[Any, Any]) -> None:
    await queue.upsert_job_scheduler("stale", every_ms=1000)
    ctx = await queue._context()
    key = queue.keys.base + "schedulers"
    reply = await ctx.fcall(
        "glidemq_fireScheduler",
        [key, queue.keys.id, queue.keys.stream, queue.keys.scheduled, queue.keys.events],
        # name, expected sha1, new entry, then addJob's 17 arguments and lifo
        ["stale", "0" * 40, "", "n", "1", "{}", str(now_ms()), "0", "0", "", "1", *_PLAIN_LIMITS],
    )
    assert reply == [b"skip", b""]
    assert await queue.get_job_scheduler("stale") is not None
    assert (await queue.get_job_counts()).waiting == 0


async def test_cron_with_seconds_and_time_zone_fires_on_whole_seconds(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    before = now_ms()
    s = await queue.upsert_job_scheduler("sec", cron="* * * * * *", tz="Europe/Berlin")
    after = now_ms()  # the next whole second after a moment between the two
    assert s.next_run % 1000 == 0 and before < s.next_run <= after + 1000
    async with (
        Worker(queue.name, record, connection=conn, **FAST),
        Worker(queue.name, record, connection=conn, **FAST),
    ):
        await wait_for(lambda: len(ran) >= 3, timeout=10)
        await queue.remove_job_scheduler("sec")
    ticks = sorted(_run_of(j, "sec") for j in ran)
    assert len(ticks) == len(set(ticks))
    assert all(t % 1000 == 0 for t in ticks)
    assert ticks[:3] == [ticks[0], ticks[0] + 1000, ticks[0] + 2000]


async def test_time_zone_places_the_next_run(queue: Queue[Any, Any]) -> None:
    zone = ZoneInfo("America/New_York")
    s = await queue.upsert_job_scheduler("nine", cron="0 9 * * *", tz="America/New_York")
    now = datetime.fromtimestamp(now_ms() / 1000, zone)
    today = datetime(now.year, now.month, now.day, 9, tzinfo=zone)
    if today <= now:
        nxt = now.date() + timedelta(days=1)
        today = datetime(nxt.year, nxt.month, nxt.day, 9, tzinfo=zone)
    assert s.next_run == int(today.timestamp() * 1000)
    assert s.tz == "America/New_York" and s.cron == "0 9 * * *"
    utc = await queue.upsert_job_scheduler("nine-utc", cron="0 9 * * *")
    assert datetime.fromtimestamp(utc.next_run / 1000, ZoneInfo("UTC")).hour == 9


async def test_upsert_keeps_the_next_run_unless_the_schedule_changes(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    first = await queue.upsert_job_scheduler("yearly", cron="0 0 1 1 *", template={"data": 1})
    again = await queue.upsert_job_scheduler(
        "yearly", cron="0 0 1 1 *", template={"name": "renamed", "data": 2}
    )
    assert again.next_run == first.next_run
    got = await queue.get_job_scheduler("yearly")
    assert got is not None and got.template.name == "renamed" and got.template.data == 2
    moved = await queue.upsert_job_scheduler("yearly", cron="0 0 1 6 *")
    assert moved.next_run != first.next_run
    assert datetime.fromtimestamp(moved.next_run / 1000, ZoneInfo("UTC")).month == 6

    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    await queue.upsert_job_scheduler("fast", every_ms=150)
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_for(lambda: len(ran) >= 2, timeout=10)
        await queue.upsert_job_scheduler("fast", every_ms=60_000)  # moves the next run
    s = await queue.get_job_scheduler("fast")
    assert s is not None and s.last_run is not None
    assert s.count == len(ran)  # the count carries over an upsert
    assert s.next_run == s.last_run + 60_000


async def test_remove_stops_the_scheduler(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    await queue.upsert_job_scheduler("gone", every_ms=100)
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_for(lambda: len(ran) >= 2, timeout=10)
        assert await queue.remove_job_scheduler("gone") is True
        await asyncio.sleep(0.3)  # a run being fired right now may still land
        settled = len(ran)
        await asyncio.sleep(0.5)
        assert len(ran) == settled
    assert await queue.get_job_scheduler("gone") is None
    assert await queue.remove_job_scheduler("gone") is False


async def test_limit_stops_after_that_many_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    await queue.upsert_job_scheduler("thrice", every_ms=100, limit=3)
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_for(lambda: len(ran) >= 3, timeout=10)
        await asyncio.sleep(0.5)
    assert len(ran) == 3
    assert await queue.get_job_scheduler("thrice") is None  # removed after its last run


async def test_start_and_end_dates_bound_the_runs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    start = now_ms() + 700
    end = start + 600
    s = await queue.upsert_job_scheduler("window", every_ms=300, start_date=start, end_date=end)
    assert s.next_run == start
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_for(lambda: len(ran) >= 3, timeout=10)
        await asyncio.sleep(0.5)
    assert sorted(_run_of(j, "window") for j in ran) == [start, start + 300, start + 600]
    assert await queue.get_job_scheduler("window") is None
    with pytest.raises(ValidationError, match="end_date"):
        await queue.upsert_job_scheduler("past", every_ms=100, end_date=now_ms() - 1000)


async def test_missed_runs_fire_once_then_the_schedule_resumes(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    s = await queue.upsert_job_scheduler("late", every_ms=400)
    first = s.next_run
    await asyncio.sleep(1.5)  # no worker: the runs at +400, +800 and +1200 are missed
    started = now_ms()
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_for(lambda: len(ran) >= 2, timeout=10)
    ticks = sorted(_run_of(j, "late") for j in ran)
    assert ticks[0] == first  # the oldest missed run fires, once
    assert ticks[1] > started  # the other missed runs are skipped ...
    assert (ticks[1] - first) % 400 == 0  # ... and the schedule keeps its grid


async def test_template_options_apply_to_each_job(queue: Queue[Any, Any]) -> None:
    opts = JobOptions(attempts=3, priority=2, delay=60_000, ttl=90_000)
    await queue.upsert_job_scheduler(
        "opts", every_ms=60_000, template=JobTemplate("with-opts", {"a": [1, 2]}, opts)
    )
    got = await queue.get_job_scheduler("opts")
    assert got is not None and got.template.opts == opts
    ctx = await queue._context()
    await SchedulerRunner(lambda exc: None).fire_due(ctx, now_ms())
    jobs = await queue.get_jobs("delayed")
    assert len(jobs) == 1
    job = jobs[0]
    assert job.name == "with-opts" and job.data == {"a": [1, 2]}
    assert job.max_attempts == 3 and job.priority == 2 and job.delay == 60_000
    assert job.expire_at == job.timestamp + 90_000
    listed = await queue.get_job_schedulers()
    assert [s.name for s in listed] == ["opts"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "cron"),
        ({"cron": "* * * * *", "every_ms": 10}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "tz"),
        ({"every_ms": 100, "tz": "UTC"}, "tz"),
        ({"every_ms": 0}, "every_ms"),
        ({"every_ms": 100, "limit": 0}, "limit"),
        ({"every_ms": 100, "start_date": 2000, "end_date": 1000}, "end_date"),
        ({"every_ms": 100, "start_date": datetime(2030, 1, 1)}, "start_date"),
        ({"every_ms": 100, "template": {"nme": "x"}}, "template.nme"),
        ({"every_ms": 100, "template": {"opts": {"job_id": "x"}}}, "template.opts.job_id"),
        ({"every_ms": 100, "template": {"opts": {"atempts": 2}}}, "template.opts.atempts"),
        ({"every_ms": 100, "template": {"data": {1, 2}}}, "template.data"),
    ],
)
async def test_bad_schedulers_are_refused_with_the_field_named(
    standalone_conn: ConnectionOptions, queue_name: str, kwargs: dict[str, Any], field: str
) -> None:
    # validation happens before anything is sent: one server kind is enough
    async with Queue(queue_name, connection=standalone_conn) as queue:
        with pytest.raises(ValidationError) as info:
            await queue.upsert_job_scheduler("bad", **kwargs)
        assert info.value.field == field
        assert await queue.get_job_schedulers() == []


async def test_bad_names_and_oversize_templates_are_refused(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    async with Queue(queue_name, connection=standalone_conn) as queue:
        for name in ("", "a:b", "x" * 201):
            with pytest.raises(ValidationError, match="name"):
                await queue.upsert_job_scheduler(name, every_ms=100)
        with pytest.raises(PayloadTooLargeError) as info:
            await queue.upsert_job_scheduler(
                "big", every_ms=100, template={"data": "x" * 2_000_000}
            )
        assert info.value.field == "template.data"
        assert await queue.get_job_schedulers() == []


async def test_a_compressing_queue_schedules_compressed_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with Queue(queue.name, connection=conn, compression=True) as zipped:
        s = await zipped.upsert_job_scheduler("zip", every_ms=60_000, template={"data": "x" * 500})
    assert s.compress
    ctx = await queue._context()  # a worker's context does not compress on its own
    await SchedulerRunner(lambda exc: None).fire_due(ctx, now_ms())
    job_id = s.job_id(s.next_run)
    raw = await ctx.command(lambda c: c.hget(queue.keys.job(job_id), "data"))
    assert raw.startswith(b"gz:")
    job = await queue.get_job(job_id)
    assert job is not None and job.data == "x" * 500
