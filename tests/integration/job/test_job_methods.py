"""Methods of Job: logs, progress, data, state queries, remove, retry, priority, delay,
promote, waiting for the end, failing from inside a processor, refresh."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    GlideMQError,
    Job,
    JobNotFoundError,
    JobStateError,
    JobTimeoutError,
    Queue,
    QueueEvent,
    QueueEvents,
    ValidationError,
    Worker,
)
from tests.helpers import wait_for


async def succeed(job: Job[Any, Any]) -> Any:
    return {"echo": job.data}


async def explode(job: Job[Any, Any]) -> None:
    raise RuntimeError("kaput")


async def next_event(events: QueueEvents, name: str, job_id: str) -> QueueEvent:
    """The next event called `name` for `job_id`, skipping others."""
    while True:
        ev = await events.next(timeout=10)
        if ev.event == name and ev.job_id == job_id:
            return ev


# =========================================================================== log, progress, data


async def test_log_appends_lines_and_returns_the_length(queue: Queue[Any, Any]) -> None:
    job = await queue.add("j", 1)
    assert job is not None
    assert await job.log("one") == 1
    assert await job.log("two") == 2
    assert await queue.get_job_logs(job.id) == (["one", "two"], 2)


async def test_update_progress_number_and_dict_are_stored_and_emitted(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("p", 1)
    assert job is not None
    async with QueueEvents(queue.name, connection=conn) as events:
        await job.update_progress(42)
        assert job.progress == 42
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.progress == 42
        ev = await next_event(events, "progress", job.id)
        assert ev.fields["data"] == "42"

        await job.update_progress({"step": "upload", "pct": 50.5})
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.progress == {"step": "upload", "pct": 50.5}
        ev = await next_event(events, "progress", job.id)
        assert ev.fields["data"] == '{"step":"upload","pct":50.5}'


async def test_progress_reported_while_running_is_visible(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("p", 1)
    assert job is not None
    proceed = asyncio.Event()

    async def reporting(j: Job[Any, Any]) -> str:
        await j.update_progress(30)
        await proceed.wait()
        await j.update_progress(100)
        return "ok"

    async with Worker(queue.name, reporting, connection=conn) as worker:

        async def progress() -> Any:
            stored = await queue.get_job(job.id)
            return stored is not None and stored.progress == 30

        await wait_for(progress)
        assert await job.is_active()
        proceed.set()
        await wait_for(lambda: worker.completed_count == 1)
    final = await job.refresh()
    assert final.progress == 100 and final.state == "completed"


@pytest.mark.parametrize("bad", ["50%", None, True, [1, 2]])
async def test_update_progress_rejects_other_types(queue: Queue[Any, Any], bad: Any) -> None:
    job = await queue.add("p", 1)
    assert job is not None
    with pytest.raises(ValidationError) as info:
        await job.update_progress(bad)
    assert info.value.field == "progress"
    assert (await job.refresh()).progress == 0


async def test_update_data_is_persisted_and_seen_by_the_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("d", {"v": 1})
    assert job is not None
    await job.update_data({"v": 2, "extra": [1, 2]})
    assert job.data == {"v": 2, "extra": [1, 2]}
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.data == {"v": 2, "extra": [1, 2]}
    async with Worker(queue.name, succeed, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert (await job.refresh()).returnvalue == {"echo": {"v": 2, "extra": [1, 2]}}


async def test_update_data_inside_processor_survives_a_retry(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("d", {"tries": 0}, {"attempts": 2})
    assert job is not None

    async def count_tries(j: Job[Any, Any]) -> int:
        tries = j.data["tries"] + 1
        await j.update_data({"tries": tries})
        if tries == 1:
            raise RuntimeError("first try fails")
        return tries

    async with Worker(queue.name, count_tries, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    final = await job.refresh()
    assert final.returnvalue == 2 and final.data == {"tries": 2}


async def test_update_data_validates_like_add(queue: Queue[Any, Any]) -> None:
    job = await queue.add("d", {"v": 1})
    assert job is not None
    with pytest.raises(ValidationError) as info:
        await job.update_data({"v": {1, 2}})
    assert info.value.field == "data"
    assert (await job.refresh()).data == {"v": 1}


# =========================================================================== state queries


async def test_state_predicates_of_waiting_delayed_and_prioritized(queue: Queue[Any, Any]) -> None:
    waiting = await queue.add("w", 1)
    delayed = await queue.add("d", 1, {"delay": 60_000})
    prio = await queue.add("p", 1, {"priority": 2})
    assert waiting and delayed and prio
    assert await waiting.get_state() == "waiting"
    assert await waiting.is_waiting()
    assert not await waiting.is_delayed()
    assert not await waiting.is_active()
    assert not await waiting.is_completed()
    assert not await waiting.is_failed()
    assert not await waiting.is_revoked()
    assert await delayed.get_state() == "delayed"
    assert await delayed.is_delayed() and not await delayed.is_waiting()
    assert await prio.get_state() == "prioritized"
    assert await prio.is_waiting()  # waiting to run, by priority
    assert not await prio.is_delayed()


async def test_state_predicates_through_the_life_of_a_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ok = await queue.add("ok", 1)
    bad = await queue.add("bad", 1)
    assert ok and bad
    seen_active: dict[str, bool] = {}

    async def proc(j: Job[Any, Any]) -> int:
        seen_active[j.id] = await j.is_active() and await j.get_state() == "active"
        if j.name == "bad":
            raise ValueError("no")
        return 1

    async with Worker(queue.name, proc, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1 and worker.failed_count == 1)
    assert seen_active == {ok.id: True, bad.id: True}
    assert await ok.is_completed() and not await ok.is_failed() and not await ok.is_active()
    assert ok.state == "completed"  # get_state updates the local copy
    assert await bad.is_failed() and not await bad.is_completed()
    assert not await bad.is_revoked()


async def test_is_revoked_after_revoke(queue: Queue[Any, Any]) -> None:
    job = await queue.add("r", 1)
    assert job is not None
    await queue.revoke(job.id)
    assert await job.is_revoked()
    assert await job.is_failed()


# =========================================================================== remove


async def test_remove_deletes_the_job(queue: Queue[Any, Any]) -> None:
    job = await queue.add("gone", 1)
    assert job is not None
    await job.log("line")
    await job.remove()
    assert await queue.get_job(job.id) is None
    assert (await queue.get_job_counts()).waiting == 0
    assert await queue.get_job_logs(job.id) == ([], 0)


@pytest.mark.parametrize(
    "operation",
    [
        "get_state",
        "is_completed",
        "is_waiting",
        "refresh",
        "remove",
        "update_progress",
        "update_data",
        "change_priority",
        "change_delay",
        "promote",
        "wait_until_finished",
        "retry",
        "log",
    ],
)
async def test_operations_on_a_removed_job_raise_job_not_found(
    queue: Queue[Any, Any], operation: str
) -> None:
    job = await queue.add("gone", 1)
    assert job is not None
    await queue.remove(job.id)
    calls: dict[str, Any] = {
        "get_state": job.get_state,
        "is_completed": job.is_completed,
        "is_waiting": job.is_waiting,
        "refresh": job.refresh,
        "remove": job.remove,
        "update_progress": lambda: job.update_progress(5),
        "update_data": lambda: job.update_data({"new": 1}),
        "change_priority": lambda: job.change_priority(3),
        "change_delay": lambda: job.change_delay(100),
        "promote": job.promote,
        "wait_until_finished": lambda: job.wait_until_finished(timeout=5),
        "retry": job.retry,
        "log": lambda: job.log("too late"),
    }
    with pytest.raises(JobNotFoundError) as info:
        await calls[operation]()
    assert info.value.job_id == job.id
    assert isinstance(info.value, GlideMQError)
    assert await queue.get_job(job.id) is None, "the operation brought the job back"
    assert await queue.get_job_logs(job.id) == ([], 0), "the operation left a log behind"


async def test_remove_of_a_running_job_raises_job_state_error(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("busy", 1)
    assert job is not None
    release = asyncio.Event()

    async def hang(j: Job[Any, Any]) -> str:
        await release.wait()
        return "done"

    async with Worker(queue.name, hang, connection=conn) as worker:
        await wait_for(job.is_active)
        with pytest.raises(JobStateError) as info:
            await job.remove()
        assert info.value.operation == "remove"
        release.set()
        await wait_for(lambda: worker.completed_count == 1)
    assert await job.is_completed()


# =========================================================================== retry


async def test_retry_of_a_failed_job(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    job = await queue.add("flaky", 1)
    assert job is not None
    async with Worker(queue.name, explode, connection=conn) as worker:
        await wait_for(lambda: worker.failed_count == 1)
    await job.refresh()
    assert job.state == "failed" and job.attempts_made == 1 and job.failed_reason == "kaput"

    await job.retry()
    fresh = await job.refresh()
    assert fresh.state == "waiting"
    assert fresh.attempts_made == 0 and fresh.failed_reason is None
    assert (await queue.get_job_counts()).failed == 0

    async with Worker(queue.name, succeed, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert await job.is_completed()


async def test_retry_of_a_completed_job(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    job = await queue.add("twice", 7)
    assert job is not None
    async with Worker(queue.name, succeed, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
        with pytest.raises(JobStateError):
            await job.retry()  # it is not failed
        await job.retry(state="completed")
        await wait_for(lambda: worker.completed_count == 2)
    assert (await job.refresh()).state == "completed"


async def test_retry_of_a_waiting_job_raises(queue: Queue[Any, Any]) -> None:
    job = await queue.add("w", 1)
    assert job is not None
    with pytest.raises(JobStateError):
        await job.retry()
    with pytest.raises(ValidationError) as info:
        await job.retry(state="waiting")
    assert info.value.field == "state"
    assert await job.get_state() == "waiting"


# ================================================================ priority, delay, promote


async def test_change_priority_reorders_waiting_work(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    a = await queue.add("a", 0, {"priority": 10})
    b = await queue.add("b", 0, {"priority": 10})
    c = await queue.add("c", 0, {"priority": 10})
    w = await queue.add("w", 0)
    assert a and b and c and w
    await c.change_priority(1)
    assert c.priority == 1 and c.state == "prioritized"
    await w.change_priority(5)  # a waiting job becomes prioritized
    assert w.state == "prioritized" and await w.get_state() == "prioritized"
    assert [j.id for j in await queue.get_jobs("prioritized")] == [c.id, w.id, a.id, b.id]
    order: list[str] = []

    async def record(j: Job[Any, Any]) -> None:
        order.append(j.name)

    async with Worker(queue.name, record, connection=conn, concurrency=1) as worker:
        await wait_for(lambda: worker.completed_count == 4)
    assert order == ["c", "w", "a", "b"]


async def test_change_priority_to_zero_makes_it_waiting(queue: Queue[Any, Any]) -> None:
    job = await queue.add("p", 0, {"priority": 3})
    assert job is not None
    await job.change_priority(0)
    assert job.state == "waiting"
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.state == "waiting" and stored.priority == 0


async def test_change_priority_of_a_delayed_job_keeps_it_delayed(queue: Queue[Any, Any]) -> None:
    job = await queue.add("d", 0, {"delay": 60_000})
    assert job is not None
    await job.change_priority(4)
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.state == "delayed" and stored.priority == 4
    assert [j.id for j in await queue.get_jobs("delayed")] == [job.id]


@pytest.mark.parametrize("bad", [-1, 2048, 1.5, "3"])
async def test_change_priority_rejects_bad_values(queue: Queue[Any, Any], bad: Any) -> None:
    job = await queue.add("p", 0, {"priority": 3})
    assert job is not None
    with pytest.raises(ValidationError) as info:
        await job.change_priority(bad)
    assert info.value.field == "priority"
    assert (await job.refresh()).priority == 3


async def test_change_delay_reschedules_a_delayed_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("d", 1, {"delay": 600_000})
    assert job is not None
    async with Worker(queue.name, succeed, connection=conn, promotion_interval=50) as worker:
        await job.change_delay(100)
        assert job.state == "delayed" and job.delay == 100
        # ten minutes became 100 ms: it runs long before the old delay
        await wait_for(lambda: worker.completed_count == 1)
    assert await job.is_completed()


async def test_change_delay_to_zero_makes_it_waiting(queue: Queue[Any, Any]) -> None:
    job = await queue.add("d", 1, {"delay": 60_000})
    assert job is not None
    await job.change_delay(0)
    assert job.state == "waiting"
    assert [j.id for j in await queue.get_jobs("waiting")] == [job.id]


async def test_change_delay_of_a_waiting_job_raises_job_state_error(
    queue: Queue[Any, Any],
) -> None:
    job = await queue.add("w", 1)
    assert job is not None
    with pytest.raises(JobStateError) as info:
        await job.change_delay(1000)
    assert info.value.operation == "change delay"
    assert await job.get_state() == "waiting"
    with pytest.raises(ValidationError) as bad:
        await job.change_delay(-1)
    assert bad.value.field == "delay"


async def test_promote_makes_a_delayed_job_run_now(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("d", 1, {"delay": 600_000})
    assert job is not None
    await job.promote()
    assert job.state == "waiting"
    assert await job.is_waiting()
    assert [j.id for j in await queue.get_jobs("waiting")] == [job.id]
    assert (await queue.get_job_counts()).delayed == 0
    async with Worker(queue.name, succeed, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert await job.is_completed()


async def test_promote_of_a_waiting_job_raises(queue: Queue[Any, Any]) -> None:
    job = await queue.add("w", 1)
    assert job is not None
    with pytest.raises(JobStateError):
        await job.promote()


# =========================================================================== waiting for the end


async def test_wait_until_finished_returns_completed_and_refreshes(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("w", {"n": 3})
    assert job is not None and job.returnvalue is None
    async with Worker(queue.name, succeed, connection=conn):
        assert await job.wait_until_finished(timeout=10) == "completed"
    assert job.state == "completed"
    assert job.returnvalue == {"echo": {"n": 3}}
    assert job.finished_on is not None


async def test_wait_until_finished_returns_failed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("w", 1)
    assert job is not None
    async with Worker(queue.name, explode, connection=conn):
        assert await job.wait_until_finished(timeout=10) == "failed"
    assert job.failed_reason == "kaput" and job.state == "failed"


async def test_wait_until_finished_times_out(queue: Queue[Any, Any]) -> None:
    job = await queue.add("nobody-runs-me", 1)
    assert job is not None
    with pytest.raises(JobTimeoutError) as info:
        await job.wait_until_finished(poll_interval=0.02, timeout=0.2)
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, GlideMQError)
    assert await job.get_state() == "waiting"


# ================================================================ failing from a processor


async def test_move_to_failed_inside_a_processor(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("m", 1)
    assert job is not None

    async def give_up(j: Job[Any, Any]) -> str:
        await j.move_to_failed(ValueError("not today"))
        return "ignored"

    async with Worker(queue.name, give_up, connection=conn) as worker:
        await wait_for(lambda: worker.failed_count == 1)
        await wait_for(lambda: worker.active_count == 0)
    fresh = await job.refresh()
    assert fresh.state == "failed" and fresh.failed_reason == "not today"
    assert fresh.returnvalue is None
    assert worker.completed_count == 0
    assert (await queue.get_job_counts()).completed == 0


async def test_move_to_failed_still_uses_remaining_attempts(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("m", 1, {"attempts": 2})
    assert job is not None

    async def first_time_fails(j: Job[Any, Any]) -> str:
        if j.attempts_made == 0:
            await j.move_to_failed(ValueError("once"))
            return "ignored"
        return "second time"

    async with Worker(queue.name, first_time_fails, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    fresh = await job.refresh()
    assert fresh.state == "completed" and fresh.returnvalue == "second time"
    assert fresh.attempts_made == 1


async def test_move_to_failed_outside_a_processor_raises(queue: Queue[Any, Any]) -> None:
    job = await queue.add("m", 1)
    assert job is not None
    with pytest.raises(JobStateError):
        await job.move_to_failed(ValueError("x"))
    assert await job.get_state() == "waiting"


async def test_discard_makes_the_failure_final(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("m", 1, {"attempts": 5})
    assert job is not None
    runs = 0

    async def discard_and_fail(j: Job[Any, Any]) -> None:
        nonlocal runs
        runs += 1
        j.discard()
        assert j.discarded
        raise RuntimeError("fatal")

    async with Worker(queue.name, discard_and_fail, connection=conn) as worker:
        await wait_for(lambda: worker.failed_count == 1)
    fresh = await job.refresh()
    assert fresh.state == "failed" and fresh.attempts_made == 1
    assert runs == 1


# =========================================================================== refresh


async def test_refresh_reads_every_field_again(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("r", {"x": 1})
    assert job is not None
    assert job.processed_on is None and job.finished_on is None
    async with Worker(queue.name, succeed, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert job.state == "waiting"  # the local copy is stale until refreshed
    same = await job.refresh()
    assert same is job
    assert job.state == "completed"
    assert job.returnvalue == {"echo": {"x": 1}}
    assert job.processed_on is not None and job.finished_on is not None
    assert job.finished_on >= job.processed_on >= job.timestamp
    assert job.data == {"x": 1} and job.name == "r"
