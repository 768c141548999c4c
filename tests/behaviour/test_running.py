"""Running jobs: results, retries and backoff, typed errors, step jobs, job methods, events,
concurrency, timeouts and ttl."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from glide import StreamGroupOptions

from glidemq import JobTimeoutError, UnrecoverableError
from glidemq.wire import fetch as wire_fetch
from glidemq.worker.lease import Revalidation
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state


async def test_worker_completes_jobs_and_stores_results(backend: Backend) -> None:
    async def double(job: Any) -> int:
        return int(job.data) * 2

    jobs = [await backend.queue.add("n", i) for i in range(3)]
    async with backend.worker(double, concurrency=2) as worker:
        for job in jobs:
            assert job is not None
            assert await job.wait_until_finished(timeout=10) == "completed"
        assert [j.returnvalue for j in jobs if j] == [0, 2, 4]
        await wait_for(lambda: worker.completed_count == 3)
    stored = await backend.queue.get_job(jobs[2].id if jobs[2] else "")
    assert stored is not None and stored.state == "completed" and stored.returnvalue == 4
    assert stored.finished_on is not None and stored.processed_on is not None
    counts = await backend.queue.get_job_counts()
    assert (counts.completed, counts.active, counts.waiting) == (3, 0, 0)


async def test_failing_job_is_retried_until_attempts_run_out(backend: Backend) -> None:
    runs: list[int] = []

    def explode() -> None:
        raise ValueError("boom")

    async def always_fails(job: Any) -> None:
        runs.append(job.attempts_made)
        explode()

    job = await backend.queue.add("doomed", None, {"attempts": 3})
    assert job is not None
    async with backend.worker(always_fails) as worker:
        final = await wait_state(backend.queue, job.id, "failed")
        assert worker.failed_count == 3
    assert runs == [0, 1, 2]
    assert final.attempts_made == 3 and final.failed_reason == "boom"
    assert final.stacktrace is not None and "explode" in final.stacktrace
    assert [j.id for j in await backend.queue.get_jobs("failed")] == [job.id]


async def test_job_that_fails_then_succeeds_completes(backend: Backend) -> None:
    async def flaky(job: Any) -> str:
        if job.attempts_made < 2:
            raise RuntimeError("not yet")
        return "ok"

    job = await backend.queue.add("flaky", None, {"attempts": 3})
    assert job is not None
    async with backend.worker(flaky):
        final = await wait_state(backend.queue, job.id, "completed")
    assert final.attempts_made == 2 and final.returnvalue == "ok"


async def test_fixed_backoff_waits_before_each_retry(backend: Backend) -> None:
    runs: list[int] = []

    async def fails_once(job: Any) -> str:
        runs.append(backend.now_ms())
        if len(runs) == 1:
            raise RuntimeError("first try fails")
        return "ok"

    job = await backend.queue.add(
        "b", None, {"attempts": 2, "backoff": {"type": "fixed", "delay": 300}}
    )
    assert job is not None
    async with backend.worker(fails_once):
        retrying = await wait_state(backend.queue, job.id, "delayed")
        assert retrying.attempts_made == 1 and retrying.failed_reason == "first try fails"
        await backend.elapse(350)
        await wait_state(backend.queue, job.id, "completed")
    assert runs[1] - runs[0] >= 300


async def test_exponential_backoff_doubles_the_wait(backend: Backend) -> None:
    runs: list[int] = []

    async def fails_twice(job: Any) -> str:
        runs.append(backend.now_ms())
        if len(runs) < 3:
            raise RuntimeError("again")
        return "ok"

    job = await backend.queue.add(
        "b", None, {"attempts": 3, "backoff": {"type": "exponential", "delay": 150}}
    )
    assert job is not None
    async with backend.worker(fails_twice):
        await wait_state(backend.queue, job.id, "delayed")
        await backend.elapse(200)
        await wait_for(lambda: len(runs) == 2)
        await wait_state(backend.queue, job.id, "delayed")
        await backend.elapse(350)
        await wait_state(backend.queue, job.id, "completed")
    assert runs[1] - runs[0] >= 150
    assert runs[2] - runs[1] >= 300


async def test_unrecoverable_error_fails_at_once(backend: Backend) -> None:
    runs = 0

    async def fatal(job: Any) -> None:
        nonlocal runs
        runs += 1
        raise UnrecoverableError("bad input")

    job = await backend.queue.add("x", None, {"attempts": 5})
    assert job is not None
    async with backend.worker(fatal):
        final = await wait_state(backend.queue, job.id, "failed")
    assert runs == 1 and final.attempts_made == 1 and final.failed_reason == "bad input"


async def test_discard_makes_the_failure_final(backend: Backend) -> None:
    async def discard_and_fail(job: Any) -> None:
        job.discard()
        raise RuntimeError("discarded")

    job = await backend.queue.add("x", None, {"attempts": 4})
    assert job is not None
    async with backend.worker(discard_and_fail):
        final = await wait_state(backend.queue, job.id, "failed")
    assert final.attempts_made == 1 and final.failed_reason == "discarded"


async def test_move_to_delayed_parks_the_job_without_using_an_attempt(backend: Backend) -> None:
    runs = 0

    async def step(job: Any) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            await job.update_data({"step": 2})
            await job.move_to_delayed(backend.now_ms() + 300)
        return f"step {job.data['step']}"

    job = await backend.queue.add("steps", {"step": 1})
    assert job is not None
    async with backend.worker(step):
        parked = await wait_state(backend.queue, job.id, "delayed")
        assert parked.attempts_made == 0 and parked.data == {"step": 2}
        await backend.elapse(350)
        final = await wait_state(backend.queue, job.id, "completed")
    assert runs == 2 and final.attempts_made == 0 and final.returnvalue == "step 2"


async def test_progress_log_and_update_data_are_stored(backend: Backend) -> None:
    progress: list[Any] = []

    async def work(job: Any) -> None:
        await job.update_progress(50)
        await job.update_progress({"done": 3})
        assert await job.log("first") == 1
        assert await job.log("second") == 2
        await job.update_data({"n": 2})

    job = await backend.queue.add("p", {"n": 1})
    assert job is not None
    worker = backend.worker(work)
    worker.on("progress", lambda j, value: progress.append(value))
    async with worker:
        final = await wait_state(backend.queue, job.id, "completed")
    assert progress == [50, {"done": 3}]
    assert final.progress == {"done": 3} and final.data == {"n": 2}
    assert await backend.queue.get_job_logs(job.id) == (["first", "second"], 2)
    assert await backend.queue.get_job_logs(job.id, 1, 1) == (["second"], 2)


async def test_worker_events_follow_a_job(backend: Backend) -> None:
    seen: list[tuple[str, Any]] = []

    async def maybe_fail(job: Any) -> str:
        if job.name == "bad":
            raise RuntimeError("nope")
        return "fine"

    worker = backend.worker(maybe_fail)
    for event in ("active", "completed", "failed"):
        worker.on(event, lambda job, *rest, e=event: seen.append((e, job.name)))
    worker.on("drained", lambda: seen.append(("drained", None)))
    worker.on("closed", lambda: seen.append(("closed", None)))
    failed_states: list[str] = []
    worker.on("failed", lambda job, error: failed_states.append(job.state))
    good = await backend.queue.add("good", None)
    bad = await backend.queue.add("bad", None, {"attempts": 2})
    assert good and bad
    async with worker:
        await wait_state(backend.queue, bad.id, "failed")
        # drained: once the worker finds nothing to take (it may race the last failure)
        await wait_for(lambda: ("drained", None) in seen)
    assert seen[:2] == [("active", "good"), ("completed", "good")]
    assert seen.count(("failed", "bad")) == 2
    assert failed_states == ["retrying", "failed"]
    assert seen[-1] == ("closed", None)


def _first_failure_reply_late(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[int]:
    """Make the reply to the test's first `glidemq_fail` reach the worker `seconds` late, as
    valkey-glide may hand it back late and out of order. Returns the failure calls made."""
    real_fail = wire_fetch.fail
    fails: list[int] = []

    async def first_reply_late(*args: Any) -> Any:
        fails.append(len(fails))
        reply = await real_fail(*args)
        if len(fails) == 1:
            await asyncio.sleep(seconds)
        return reply

    monkeypatch.setattr(wire_fetch, "fail", first_reply_late)
    return fails


async def test_a_late_failure_reply_is_reported_before_the_next_try(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client may hand replies back out of order; here the first try's failure reply is
    # read 300 ms late, while the server has already queued the job's second try.
    _first_failure_reply_late(monkeypatch, 0.3)

    async def fail_at_once(job: Any) -> None:
        raise RuntimeError("nope")

    events: list[tuple[str, int, str]] = []
    worker = backend.worker(fail_at_once, concurrency=2)  # a free slot takes the next try
    worker.on("active", lambda job: events.append(("active", job.attempts_made, "")))
    worker.on("failed", lambda job, error: events.append(("failed", job.attempts_made, job.state)))
    job = await backend.queue.add("bad", None, {"attempts": 2})
    assert job is not None
    async with worker:
        await wait_state(backend.queue, job.id, "failed")
        await wait_for(lambda: len(events) == 4)
    assert events == [
        ("active", 0, ""),
        ("failed", 1, "retrying"),
        ("active", 1, ""),
        ("failed", 2, "failed"),
    ]


async def test_a_retry_that_waited_past_its_lease_asks_the_server_before_it_starts(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first try's failure reply is read 700 ms late; the retry, fetched meanwhile, waits
    # for it past its lease (2/3 of a 600 ms lock): it is held and revalidated, then runs.
    _first_failure_reply_late(monkeypatch, 0.7)
    runs: list[int] = []

    async def fail_at_once(job: Any) -> None:
        runs.append(job.attempts_made)
        raise RuntimeError("nope")

    worker = backend.worker(fail_at_once, concurrency=2, lock_duration=600)
    asked: list[bool] = []
    request = Revalidation.request

    def counted_request(self: Revalidation) -> None:
        asked.append(True)
        request(self)

    monkeypatch.setattr(Revalidation, "request", counted_request)
    events: list[tuple[str, int]] = []
    worker.on("active", lambda job: events.append(("active", job.attempts_made)))
    worker.on("failed", lambda job, error: events.append(("failed", job.attempts_made)))
    job = await backend.queue.add("bad", None, {"attempts": 2})
    assert job is not None
    async with worker:
        await wait_state(backend.queue, job.id, "failed")
        await wait_for(lambda: len(events) == 4)
    assert events == [("active", 0), ("failed", 1), ("active", 1), ("failed", 2)]
    assert runs == [0, 1]
    assert asked, "the retry started without asking the server"


@pytest.mark.parametrize("at_most_once", [False, True])
async def test_a_retry_waiting_for_the_last_record_goes_back_unrun_on_close(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, at_most_once: bool
) -> None:
    fails = _first_failure_reply_late(monkeypatch, 0.5)
    runs: list[int] = []

    async def fail_at_once(job: Any) -> None:
        runs.append(job.attempts_made)
        raise RuntimeError("nope")

    worker = backend.worker(fail_at_once, concurrency=2)
    job = await backend.queue.add("bad", None, {"attempts": 2, "at_most_once": at_most_once})
    assert job is not None
    await worker.start()
    # the first try's record is on its way, and its retry was fetched and waits for it
    await wait_for(lambda: len(fails) == 1 and len(worker._slots) == 2)
    await worker.close()
    stored = await backend.queue.get_job(job.id)
    assert stored is not None
    assert runs == [0]
    assert (stored.state, stored.attempts_made) == ("waiting", 1)


async def test_concurrency_is_never_exceeded(backend: Backend) -> None:
    running = 0
    peak = 0

    async def busy(job: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    await backend.queue.add_bulk([("j", i) for i in range(12)])
    async with backend.worker(busy, concurrency=3) as worker:
        await wait_for(lambda: worker.completed_count == 12)
    assert 1 <= peak <= 3


async def test_sync_processor_runs_too(backend: Backend) -> None:
    def upper(job: Any) -> str:
        return str(job.data).upper()

    job = await backend.queue.add("s", "abc")
    assert job is not None
    async with backend.worker(upper):
        assert await job.wait_until_finished(timeout=10) == "completed"
    assert job.returnvalue == "ABC"


async def test_try_running_past_its_timeout_fails(backend: Backend) -> None:
    async def hang(job: Any) -> None:
        await asyncio.sleep(30)

    job = await backend.queue.add("slow", None, {"timeout": 100})
    assert job is not None
    async with backend.worker(hang):
        final = await wait_state(backend.queue, job.id, "failed")
    assert final.failed_reason == "timeout"


async def test_job_not_started_within_ttl_fails_expired(backend: Backend) -> None:
    ran: list[str] = []

    async def record(job: Any) -> None:
        ran.append(job.id)

    job = await backend.queue.add("t", None, {"ttl": 200, "attempts": 3})
    assert job is not None
    stored = await backend.queue.get_job(job.id)
    assert stored is not None and stored.expire_at == job.timestamp + 200
    await backend.elapse(300)
    async with backend.worker(record):
        final = await wait_state(backend.queue, job.id, "failed")
    assert ran == [] and final.failed_reason == "expired" and final.attempts_made == 1


async def test_wait_until_finished_times_out(backend: Backend) -> None:
    job = await backend.queue.add("never-run", None)
    assert job is not None
    with pytest.raises(JobTimeoutError):
        await job.wait_until_finished(poll_interval=0.01, timeout=0.1)


async def test_queue_events_follow_a_job(backend: Backend) -> None:
    async def work(job: Any) -> str:
        await job.update_progress(10)
        return "done"

    async with backend.queue_events() as events:
        job = await backend.queue.add("e", None)
        assert job is not None
        async with backend.worker(work):
            seen = [await events.next(timeout=10) for _ in range(4)]
    assert [(ev.event, ev.job_id) for ev in seen] == [
        ("added", job.id),
        ("active", job.id),
        ("progress", job.id),
        ("completed", job.id),
    ]
    assert seen[0].fields["name"] == "e"
    assert seen[2].fields["data"] == "10"
    assert seen[3].fields["returnvalue"] == '"done"'


async def test_batch_worker_gets_lists_and_fails_single_entries(backend: Backend) -> None:
    from glidemq import BatchOptions

    sizes: list[int] = []

    async def index(jobs: list[Any]) -> list[Any]:
        sizes.append(len(jobs))
        return [ValueError("odd") if j.data % 2 else j.data * 10 for j in jobs]

    jobs = await backend.queue.add_bulk([("b", i) for i in range(4)])
    async with backend.worker(index, batch=BatchOptions(size=4, timeout_ms=50)) as worker:
        await wait_for(lambda: worker.completed_count + worker.failed_count == 4)
    assert sizes == [4]
    finals = [await backend.queue.get_job(j.id) for j in jobs if j is not None]
    assert [(j.state, j.returnvalue, j.failed_reason) for j in finals if j] == [
        ("completed", 0, None),
        ("failed", None, "odd"),
        ("completed", 20, None),
        ("failed", None, "odd"),
    ]


async def test_a_stall_scan_that_arrives_late_takes_only_what_was_idle_when_it_was_sent(
    backend: Backend,
) -> None:
    # A scan queued behind a stalled server used to reclaim entries whose owners' heartbeats
    # were queued right behind it: idle by the server's clock, but only because the server
    # had stopped (found by glidemq.sim). The entry must have been idle the whole lock when
    # the scan was sent: a scan whose `now` lags the server's clock waits that much longer.
    q = backend.queue
    job = await q.add("j", 1)
    assert job is not None
    ctx = await q._context()
    stream = q.keys.stream
    await ctx.command(
        lambda c: c.xgroup_create(stream, "workers", "0", StreamGroupOptions(make_stream=True))
    )
    got = await wire_fetch.complete_and_fetch_next(ctx, backend.now_ms(), "a", 1, "1", (), ())
    assert len(got.entries) == 3
    await asyncio.sleep(0.3)  # the entry is idle 300 ms on the server
    lock = 200

    async def scan(now: int) -> list[Any]:
        reply = await wire_fetch.reclaim_stalled(
            ctx, now, "b", lock, "0-0", 100, 5, "1", (-1, 0), False
        )
        return list(reply)

    late = await scan(backend.now_ms() - 500)  # sent 500 ms ago: the entry was not idle then
    assert int(late[1]) == 0 and await job.get_state() == "active"
    fresh = await scan(backend.now_ms())
    assert int(fresh[1]) == 1 and await job.get_state() == "waiting"
