"""Queue queries and operations: search, per-minute metrics, live workers, ttl and step jobs."""

from __future__ import annotations

import os
import socket
from typing import Any

import orjson
import pytest

from glidemq import (
    ConnectionOptions,
    Job,
    JobOptions,
    Queue,
    UnrecoverableError,
    ValidationError,
    Worker,
)
from glidemq.client.context import now_ms
from tests.helpers import FAST, wait_for, wait_state

# -- search ----------------------------------------------------------------------------------


async def _seed(queue: Queue[Any, Any]) -> dict[str, str]:
    ids = {}
    for key, name, data, opts in [
        ("welcome", "email.welcome", {"user": 1, "vip": True}, None),
        ("reset", "email.reset", {"user": 2, "vip": False}, None),
        ("code", "sms.code", {"user": "1", "note": None}, None),
        ("later", "email.digest", {"user": 1}, {"delay": 60_000}),
        ("list", "email.batch", [1, 2], None),
    ]:
        job = await queue.add(name, data, opts)
        assert job is not None
        ids[key] = job.id
    return ids


async def test_search_by_name_glob_state_and_data(queue: Queue[Any, Any]) -> None:
    ids = await _seed(queue)

    async def found(**kw: Any) -> set[str]:
        return {j.id for j in await queue.search_jobs(**kw)}

    assert await found(name="email.*") == {
        ids["welcome"],
        ids["reset"],
        ids["later"],
        ids["list"],
    }
    assert await found(name="*.code") == {ids["code"]}
    assert await found(name="email.?eset") == {ids["reset"]}
    assert await found(name="[!e]*") == {ids["code"]}
    assert await found(name="email.*", state="delayed") == {ids["later"]}
    assert await found(name="email.*", state=["waiting"]) == {
        ids["welcome"],
        ids["reset"],
        ids["list"],
    }
    # data: top-level fields, compared with their JSON types
    assert await found(data={"user": 1}) == {ids["welcome"], ids["later"]}
    assert await found(data={"user": "1"}) == {ids["code"]}
    assert await found(data={"vip": True}) == {ids["welcome"]}
    assert await found(data={"vip": False, "user": 2}) == {ids["reset"]}
    assert await found(data={"note": None}) == {ids["code"]}
    assert await found(name="sms.*", data={"user": 1}) == set()
    assert await found() == set(ids.values())
    assert len(await queue.search_jobs(limit=2)) == 2


async def test_search_finished_jobs_newest_first(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def work(job: Job[Any, Any]) -> None:
        if job.data["fail"]:
            raise UnrecoverableError("no")

    added = [await queue.add("report", {"n": i, "fail": i == 2}) for i in range(4)]
    async with Worker(queue.name, work, connection=conn, **FAST):
        for job in added:
            assert job is not None
            await wait_state(queue, job.id, "failed" if job.data["fail"] else "completed")
    done = await queue.search_jobs(name="report", state="completed")
    assert sorted(j.data["n"] for j in done) == [0, 1, 3]
    failed = await queue.search_jobs(name="rep*", state="failed", data={"n": 2})
    assert [j.data["n"] for j in failed] == [2]


async def test_search_looks_at_no_more_than_scan_jobs(queue: Queue[Any, Any]) -> None:
    for i in range(6):
        await queue.add("same", {"i": i})
    assert len(await queue.search_jobs(name="same", state="waiting", scan=3)) == 3
    assert len(await queue.search_jobs(name="same", state="waiting")) == 6
    assert await queue.search_jobs(name="same", data={"i": 5}, state="waiting", scan=3) == []


async def test_search_checks_compressed_data_too(conn: ConnectionOptions, queue_name: str) -> None:
    async with Queue(queue_name, connection=conn, compression=True) as q:
        try:
            a = await q.add("zip", {"k": "a"})
            await q.add("zip", {"k": "b"})
            found = await q.search_jobs(data={"k": "a"})
            assert a is not None and [j.id for j in found] == [a.id]
        finally:
            await q.obliterate(force=True)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"limit": 0}, "limit"),
        ({"scan": -1}, "scan"),
        ({"data": {"tags": ["a"]}}, "data.tags"),
        ({"data": ["a"]}, "data"),
        ({"name": "*" * 9}, "name"),
    ],
)
async def test_bad_search_arguments(
    standalone_conn: ConnectionOptions, queue_name: str, kw: dict[str, Any], field: str
) -> None:
    async with Queue(queue_name, connection=standalone_conn) as queue:
        with pytest.raises(ValidationError) as info:
            await queue.search_jobs(**kw)
        assert info.value.field == field


# -- metrics ---------------------------------------------------------------------------------


async def test_metrics_count_completed_and_failed_per_minute(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def work(job: Job[Any, Any]) -> None:
        if job.data:
            raise RuntimeError("boom")

    before = now_ms()
    jobs = [await queue.add("m", i in (3, 5)) for i in range(7)]
    jobs.append(await queue.add("retried", True, {"attempts": 2}))  # fails twice, counted once
    async with Worker(queue.name, work, connection=conn, concurrency=4, **FAST):
        for job in jobs:
            assert job is not None
            await wait_state(queue, job.id, "failed" if job.data else "completed")
    completed = await queue.get_metrics("completed", minutes=5)
    failed = await queue.get_metrics("failed", minutes=5)
    assert completed.total == 5 and failed.total == 3
    assert len(completed.counts) == 5 and completed.start % 60_000 == 0
    points = completed.points()
    assert points[-1][0] - points[0][0] == 4 * 60_000
    assert before // 60_000 * 60_000 <= points[-1][0] <= now_ms()  # the current minute last
    assert sum(c for minute, c in points if minute >= before // 60_000 * 60_000) == 5
    assert (await queue.get_metrics("failed", minutes=1)).counts[-1] <= 3


async def test_metrics_keep_a_bounded_window(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ctx = await queue._context()
    key = queue.keys.base + "metrics:completed"
    old = now_ms() // 60_000 - 5000
    stale = {str(old - i): b"1" for i in range(1600)}
    await ctx.command(lambda c: c.hset(key, stale))

    async def work(job: Job[Any, Any]) -> None:
        return None

    job = await queue.add("one", None)
    assert job is not None
    async with Worker(queue.name, work, connection=conn, **FAST):
        await wait_state(queue, job.id, "completed")
    assert await ctx.command(lambda c: c.hlen(key)) == 1  # the new minute started a trim
    assert (await queue.get_metrics("completed", minutes=1)).total == 1


async def test_bad_metrics_arguments(queue: Queue[Any, Any]) -> None:
    with pytest.raises(ValidationError, match="kind"):
        await queue.get_metrics("waiting")
    for minutes in (0, 1441, True):
        with pytest.raises(ValidationError, match="minutes"):
            await queue.get_metrics("completed", minutes=minutes)


# -- workers ---------------------------------------------------------------------------------


async def test_get_workers_lists_live_workers(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def work(job: Job[Any, Any]) -> None:
        return None

    started = now_ms()
    a: Worker[Any, Any] = Worker(queue.name, work, connection=conn, concurrency=3, **FAST)
    b: Worker[Any, Any] = Worker(queue.name, work, connection=conn, **FAST)
    async with a, b:
        listed = await wait_for(
            lambda: _when(queue.get_workers(), lambda ws: len(ws) == 2 and ws), timeout=5
        )
        by_id = {w.id: w for w in listed}
        assert set(by_id) == {a.consumer, b.consumer}
        assert by_id[a.consumer].concurrency == 3 and by_id[b.consumer].concurrency == 1
        for w in listed:
            assert w.pid == os.getpid() and w.host == socket.gethostname()
            assert started - 1000 <= w.started <= w.last_heartbeat <= now_ms()
        await b.close()
        after = await queue.get_workers()  # a worker that closes removes itself
        assert [w.id for w in after] == [a.consumer]
    assert await queue.get_workers() == []


async def _when(coro: Any, check: Any) -> Any:
    return check(await coro)


async def test_silent_workers_expire(queue: Queue[Any, Any]) -> None:
    ctx = await queue._context()
    key = queue.keys.base + "workers"
    now = now_ms()

    def entry(wid: str, beat: int) -> bytes:
        return orjson.dumps(
            {
                "id": wid,
                "host": "h",
                "pid": 1,
                "started": beat - 1000,
                "concurrency": 2,
                "interval": 1000,
                "heartbeat": beat,
            }
        )

    entries = {
        "fresh": entry("fresh", now),
        "silent": entry("silent", now - 6000),  # missed a few beats: hidden, kept
        "dead": entry("dead", now - 60_000),  # long gone: deleted
        "junk": b"not json",
    }
    await ctx.command(lambda c: c.hset(key, entries))
    assert [w.id for w in await queue.get_workers()] == ["fresh"]
    left = await ctx.command(lambda c: c.hkeys(key))
    assert sorted(x.decode() for x in left) == ["fresh", "silent"]


# -- ttl -------------------------------------------------------------------------------------


async def test_delayed_job_whose_ttl_ends_before_it_is_due_fails_expired(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> None:
        ran.append(job.id)

    job = await queue.add("too-late", None, JobOptions(delay=400, ttl=100, attempts=3))
    fine = await queue.add("in-time", None, JobOptions(delay=400, ttl=5000))
    assert job is not None and fine is not None
    async with Worker(queue.name, work, connection=conn, **FAST):
        expired = await wait_state(queue, job.id, "failed", timeout=5)
        await wait_state(queue, fine.id, "completed", timeout=5)
    assert ran == [fine.id]  # the expired job never ran
    assert expired.failed_reason == "expired"
    assert expired.attempts_made == 1  # final, attempts left or not
    assert expired.finished_on is not None and expired.finished_on >= job.timestamp + 400


# -- step jobs -------------------------------------------------------------------------------


async def test_move_to_delayed_with_next_step(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    seen: list[str | None] = []

    async def steps(job: Job[Any, Any]) -> str:
        seen.append(job.step)
        soon = now_ms() + 50
        if job.step is None:
            await job.move_to_delayed(soon, "charge")
        elif job.step == "charge" and seen.count("charge") == 1:
            await job.move_to_delayed(soon)  # no next step: the step stays "charge"
        elif job.step == "charge":
            await job.move_to_delayed(soon, "ship")
        return "shipped"

    job = await queue.add("order", {"id": 9})
    assert job is not None
    async with Worker(queue.name, steps, connection=conn, **FAST):
        done = await wait_state(queue, job.id, "completed", timeout=10)
    assert seen == [None, "charge", "charge", "ship"]
    assert done.step == "ship" and done.returnvalue == "shipped"
    assert done.attempts_made == 0


async def test_next_step_must_be_a_non_empty_string(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    errors: list[BaseException] = []

    async def bad(job: Job[Any, Any]) -> None:
        try:
            await job.move_to_delayed(now_ms() + 50, "")
        except ValidationError as exc:
            errors.append(exc)

    job = await queue.add("order", None)
    assert job is not None
    async with Worker(queue.name, bad, connection=conn, **FAST):
        await wait_state(queue, job.id, "completed")
    assert len(errors) == 1 and isinstance(errors[0], ValidationError)


async def test_search_prioritized_jobs_behind_many_delayed_ones(queue: Queue[Any, Any]) -> None:
    # Delayed jobs sort first in the scheduled set; the scan of prioritized jobs must not
    # spend its budget on them.
    await queue.add_bulk([("later", i, {"delay": 3_600_000}) for i in range(30)])
    urgent = await queue.add("urgent", 1, {"priority": 2})
    assert urgent is not None
    found = await queue.search_jobs(name="urgent", state="prioritized", scan=10)
    assert [j.id for j in found] == [urgent.id]


async def test_search_by_text_in_the_data_ignoring_case(queue: Queue[Any, Any]) -> None:
    a = await queue.add("mail", {"to": "Ann@Example.com", "tags": ["vip"]})
    await queue.add("mail", {"to": "bob@example.com"})
    c = await queue.add("other", "a plain string mentioning ANN@example.COM")
    found = await queue.search_jobs(text="ann@example.com", state="waiting")
    assert {j.id for j in found} == {a.id, c.id}  # type: ignore[union-attr]
    assert [j.id for j in await queue.search_jobs(text='"vip"')] == [a.id]  # type: ignore[union-attr]
    both = await queue.search_jobs(name="mail", text="ann@")
    assert [j.id for j in both] == [a.id]  # type: ignore[union-attr]
    with pytest.raises(ValidationError):
        await queue.search_jobs(text="")
