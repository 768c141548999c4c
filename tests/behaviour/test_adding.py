"""Adding jobs and reading them back: ids, bulk adds, validation, states, priorities."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import JobOptions, JobStateError, ValidationError
from glidemq.admin import JOB_STATES
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state


async def test_add_returns_a_waiting_job_with_its_fields(backend: Backend) -> None:
    job = await backend.queue.add("email", {"to": "ada"}, {"attempts": 2})
    assert job is not None
    assert job.name == "email" and job.data == {"to": "ada"}
    assert job.state == "waiting" and job.attempts_made == 0 and job.max_attempts == 2
    stored = await backend.queue.get_job(job.id)
    assert stored is not None
    assert (stored.id, stored.name, stored.data, stored.state) == (
        job.id,
        "email",
        {"to": "ada"},
        "waiting",
    )
    assert stored.opts == {"attempts": 2}
    assert await backend.queue.get_job("no-such-job") is None


async def test_custom_job_id_makes_add_idempotent(backend: Backend) -> None:
    first = await backend.queue.add("a", 1, {"job_id": "order-7"})
    second = await backend.queue.add("a", 2, {"job_id": "order-7"})
    assert first is not None and first.id == "order-7"
    assert second is None
    stored = await backend.queue.get_job("order-7")
    assert stored is not None and stored.data == 1
    assert (await backend.queue.get_job_counts()).waiting == 1


async def test_add_bulk_keeps_order_and_reports_duplicates(backend: Backend) -> None:
    await backend.queue.add("a", None, {"job_id": "taken"})
    jobs = await backend.queue.add_bulk(
        [
            ("a", 1),
            {"name": "b", "data": 2, "opts": {"priority": 3}},
            ("c", 3, {"job_id": "taken"}),
            ("d", 4, JobOptions(delay=60_000)),
        ]
    )
    assert [j is None for j in jobs] == [False, False, True, False]
    assert [j.name for j in jobs if j is not None] == ["a", "b", "d"]
    assert [j.state for j in jobs if j is not None] == ["waiting", "prioritized", "delayed"]
    counts = await backend.queue.get_job_counts()
    assert (counts.waiting, counts.prioritized, counts.delayed) == (2, 1, 1)


async def test_adds_from_many_callers_at_once_each_land_once_in_call_order(
    backend: Backend,
) -> None:
    # 40 callers, each adding again as soon as its add returns: the adds share calls, and
    # some carry a custom id already taken, which must be skipped without failing the rest.
    taken = await backend.queue.add("taken", None, {"job_id": "taken-1"})
    assert taken is not None
    counter = iter(range(600))
    clock = iter(range(10_000))
    added: list[tuple[int, int, int, int]] = []  # (i, made at, returned at, id)
    skipped: list[int] = []

    async def caller() -> None:
        for i in counter:
            opts = {"job_id": "taken-1"} if i % 97 == 0 else None
            made = next(clock)
            job = await backend.queue.add("many", {"i": i}, opts)
            if job is None:
                skipped.append(i)
            else:
                added.append((i, made, next(clock), int(job.id)))

    await asyncio.gather(*(caller() for _ in range(40)))
    assert sorted(skipped) == [i for i in range(600) if i % 97 == 0]
    assert len({job_id for *_, job_id in added}) == len(added) == 600 - len(skipped)
    waiting = await backend.queue.get_jobs("waiting", 0, -1)
    assert sorted(j.data["i"] for j in waiting if j.name == "many") == sorted(a[0] for a in added)
    # an add made after another returned has the higher id
    for _, _, returned, earlier_id in added:
        later = [job_id for _, made, _, job_id in added if made > returned]
        assert all(job_id > earlier_id for job_id in later)


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"atempts": 3}, "atempts"),
        ({"priority": -1}, "priority"),
        ({"job_id": "a:b"}, "job_id"),
        ({"backoff": {"type": "fixed", "delay": -5}}, "backoff.delay"),
    ],
)
async def test_bad_options_raise_validation_error_and_add_nothing(
    backend: Backend, opts: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        await backend.queue.add("x", None, opts)
    assert info.value.field == field
    with pytest.raises(ValidationError) as bulk:
        await backend.queue.add_bulk([("ok", 1), ("bad", 2, opts)])
    assert bulk.value.field == f"jobs[1].{field}"
    assert await backend.queue.count() == 0


async def test_non_json_data_is_refused(backend: Backend) -> None:
    with pytest.raises(ValidationError) as info:
        await backend.queue.add("x", {"when": object()})
    assert info.value.field == "data"
    assert await backend.queue.count() == 0


async def test_counts_and_get_jobs_by_state(backend: Backend) -> None:
    q = backend.queue
    w1 = await q.add("w1", None)
    w2 = await q.add("w2", None)
    d = await q.add("d", None, {"delay": 60_000})
    p = await q.add("p", None, {"priority": 5})
    assert w1 and w2 and d and p
    counts = await q.get_job_counts()
    assert counts.as_dict() == {
        "waiting": 2,
        "active": 0,
        "delayed": 1,
        "prioritized": 1,
        "completed": 0,
        "failed": 0,
        "dead_letter": 0,
        "waiting_children": 0,
    }
    assert (counts.group_waiting, counts.rate_limited) == (0, 0)
    assert counts.paused is False
    assert await q.count() == 4
    assert [j.id for j in await q.get_jobs("waiting")] == [w1.id, w2.id]
    assert [j.id for j in await q.get_jobs("waiting", 1, 1)] == [w2.id]
    assert [j.id for j in await q.get_jobs(["delayed", "prioritized"])] == [d.id, p.id]
    # every state a job can be in can be listed
    assert await q.get_jobs(["waiting-children", "group-waiting", "rate-limited"]) == []
    listed = await q.get_jobs(list(JOB_STATES))
    assert sorted(j.id for j in listed) == sorted([w1.id, w2.id, d.id, p.id])
    with pytest.raises(ValidationError):
        await q.get_jobs("sleeping")


async def test_a_job_added_with_ttl_knows_when_it_expires(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("t", None, {"ttl": 5_000})
    assert job is not None and job.expire_at == job.timestamp + 5_000
    stored = await q.get_job(job.id)
    assert stored is not None and stored.expire_at == job.expire_at
    (bulk,) = await q.add_bulk([("t", None, {"ttl": 7_000})])
    assert bulk is not None and bulk.expire_at == bulk.timestamp + 7_000
    plain = await q.add("p", None)
    assert plain is not None and plain.expire_at is None


async def test_priorities_run_lowest_number_first_fifo_within(backend: Backend) -> None:
    order: list[str] = []

    async def record(job: Any) -> None:
        order.append(job.name)

    # Fewer than 10 jobs: ids of one millisecond compare in the order they were added.
    for name, priority in (("p3", 3), ("p1-a", 1), ("p2", 2), ("p1-b", 1), ("p1-c", 1)):
        await backend.queue.add(name, None, {"priority": priority})
    async with backend.worker(record, concurrency=1):
        await wait_for(lambda: len(order) == 5)
    assert order == ["p1-a", "p1-b", "p1-c", "p2", "p3"]


async def test_jobs_without_priority_run_before_prioritized_ones(backend: Backend) -> None:
    order: list[str] = []

    async def record(job: Any) -> None:
        order.append(job.name)

    await backend.queue.add("low", None, {"priority": 10})
    await backend.queue.add("plain", None)
    async with backend.worker(record, concurrency=1):
        await wait_for(lambda: len(order) == 2)
    assert order == ["plain", "low"]


async def test_delayed_job_runs_only_after_its_delay(backend: Backend) -> None:
    ran: list[int] = []

    async def record(job: Any) -> None:
        ran.append(backend.now_ms())

    job = await backend.queue.add("later", None, {"delay": 400})
    assert job is not None and job.state == "delayed"
    async with backend.worker(record):
        await asyncio.sleep(0.05)
        assert ran == [] and (await job.get_state()) == "delayed"
        await backend.elapse(450)
        final = await wait_state(backend.queue, job.id, "completed")
    assert ran[0] >= job.timestamp + 400
    assert final.processed_on is not None and final.processed_on >= job.timestamp + 400


async def test_change_delay_promote_and_change_priority(backend: Backend) -> None:
    q = backend.queue
    delayed = await q.add("d", None, {"delay": 60_000})
    later = await q.add("l", None, {"delay": 60_000})
    prio = await q.add("p", None, {"priority": 4})
    assert delayed and later and prio
    await delayed.promote()
    assert await delayed.get_state() == "waiting"
    await later.change_delay(0)
    assert await later.get_state() == "waiting"
    await prio.change_priority(0)
    assert await prio.get_state() == "waiting"
    waiting = await q.get_jobs("waiting")
    assert [j.id for j in waiting] == [delayed.id, later.id, prio.id]
    with pytest.raises(JobStateError):
        await delayed.change_delay(100)


async def test_search_jobs_by_name_glob_data_and_state(backend: Backend) -> None:
    q = backend.queue
    await q.add_bulk(
        [
            ("email.welcome", {"user": 1, "vip": True}),
            ("email.digest", {"user": 2, "vip": False}),
            ("sms.code", {"user": 1}),
            ("email.later", {"user": 1}, {"delay": 60_000}),
        ]
    )
    found = await q.search_jobs("email.*")
    assert sorted(j.name for j in found) == ["email.digest", "email.later", "email.welcome"]
    by_data = await q.search_jobs(data={"user": 1}, state="waiting")
    assert [j.name for j in by_data] == ["email.welcome", "sms.code"]
    assert [j.name for j in await q.search_jobs(data={"vip": True})] == ["email.welcome"]
    assert [j.name for j in await q.search_jobs("email.*", state="delayed")] == ["email.later"]
    assert len(await q.search_jobs(limit=2)) == 2
    with pytest.raises(ValidationError):
        await q.search_jobs(state="sleeping")


async def test_metrics_count_finished_jobs_per_minute(backend: Backend) -> None:
    async def maybe(job: Any) -> None:
        if job.data:
            raise RuntimeError("no")

    await backend.queue.add_bulk([("m", False), ("m", False), ("m", True)])
    async with backend.worker(maybe) as worker:
        await wait_for(lambda: worker.completed_count == 2 and worker.failed_count == 1)
    completed = await backend.queue.get_metrics("completed", minutes=5)
    failed = await backend.queue.get_metrics("failed", minutes=5)
    assert completed.total == 2 and failed.total == 1
    assert len(completed.counts) == 5 and completed.counts[-1] + completed.counts[-2] == 2
    with pytest.raises(ValidationError):
        await backend.queue.get_metrics("active")
