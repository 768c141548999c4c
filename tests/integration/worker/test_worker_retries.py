"""Failures: attempts, backoff, unrecoverable errors, timeouts, dead letter, failed events."""

from __future__ import annotations

import asyncio
from typing import Any

from glidemq import Backoff, ConnectionOptions, Job, JobOptions, Queue, UnrecoverableError, Worker
from glidemq.client.context import now_ms
from tests.helpers import FAST, job_state, wait_for, wait_state


async def test_job_failing_twice_then_succeeding_completes(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs: list[int] = []

    async def flaky(job: Job[Any, str]) -> str:
        runs.append(job.attempts_made)
        if len(runs) < 3:
            raise RuntimeError(f"fail #{len(runs)}")
        return "ok"

    job = await queue.add("flaky", None, JobOptions(attempts=3))
    assert job is not None
    async with Worker(queue.name, flaky, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "completed")
    assert runs == [0, 1, 2]  # each try sees the attempts made before it
    assert final.attempts_made == 2
    assert final.returnvalue == "ok"
    counts = await queue.get_job_counts()
    assert counts.completed == 1 and counts.failed == 0 and counts.active == 0


async def test_exhausted_attempts_fail_with_reason_and_stacktrace(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs = 0

    def explode_deeply() -> None:
        raise ValueError("boom at the bottom")

    async def always_fails(job: Job[Any, None]) -> None:
        nonlocal runs
        runs += 1
        explode_deeply()

    job = await queue.add("doomed", None, JobOptions(attempts=2))
    assert job is not None
    async with Worker(queue.name, always_fails, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "failed")
    assert runs == 2
    assert final.attempts_made == 2
    assert final.failed_reason == "boom at the bottom"
    assert final.stacktrace is not None
    assert "ValueError: boom at the bottom" in final.stacktrace
    assert "explode_deeply" in final.stacktrace
    counts = await queue.get_job_counts()
    assert counts.failed == 1 and counts.completed == 0 and counts.waiting == 0


async def _observe_delayed_between_tries(
    queue: Queue[Any, Any], conn: ConnectionOptions, backoff: Backoff, attempts: int
) -> tuple[list[int], list[str]]:
    """Run a job that fails every try but the last; return run times and observed states."""
    runs: list[int] = []
    failed_once = asyncio.Event()

    async def processor(job: Job[Any, str]) -> str:
        runs.append(now_ms())
        if len(runs) < attempts:
            failed_once.set()
            raise RuntimeError("not yet")
        return "done"

    job = await queue.add("backoff", None, JobOptions(attempts=attempts, backoff=backoff))
    assert job is not None
    seen: list[str] = []
    async with Worker(queue.name, processor, connection=conn, **FAST):
        await asyncio.wait_for(failed_once.wait(), 10)

        async def delayed_seen() -> bool:
            state = await job_state(queue, job.id)
            if state is not None and (not seen or seen[-1] != state):
                seen.append(state)
            return state == "delayed"

        await wait_for(delayed_seen, timeout=5, interval=0.01)
        final = await wait_state(queue, job.id, "completed")
    assert final.attempts_made == attempts - 1
    assert len(runs) == attempts
    return runs, seen


async def test_fixed_backoff_delays_each_retry(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs, seen = await _observe_delayed_between_tries(
        queue, conn, Backoff(type="fixed", delay=300), attempts=3
    )
    assert "delayed" in seen
    assert runs[1] - runs[0] >= 300
    assert runs[2] - runs[1] >= 300


async def test_exponential_backoff_doubles_between_retries(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs, seen = await _observe_delayed_between_tries(
        queue, conn, Backoff(type="exponential", delay=200), attempts=3
    )
    assert "delayed" in seen
    assert runs[1] - runs[0] >= 200
    assert runs[2] - runs[1] >= 400


async def test_custom_backoff_strategy_gets_attempts_and_error(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    raised: list[BaseException] = []
    calls: list[tuple[int, BaseException]] = []

    def mine(attempts_made: int, error: BaseException) -> int:
        calls.append((attempts_made, error))
        return 150

    async def processor(job: Job[Any, str]) -> str:
        if len(raised) < 2:
            exc = RuntimeError(f"try {len(raised) + 1}")
            raised.append(exc)
            raise exc
        return "fine"

    job = await queue.add("custom", None, JobOptions(attempts=3, backoff=Backoff(type="mine")))
    assert job is not None
    async with Worker(
        queue.name, processor, connection=conn, backoff_strategies={"mine": mine}, **FAST
    ):
        final = await wait_state(queue, job.id, "completed")
    assert [n for n, _ in calls] == [1, 2]
    assert calls[0][1] is raised[0] and calls[1][1] is raised[1]
    assert final.attempts_made == 2


async def test_custom_backoff_returning_negative_stops_retrying(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs = 0

    async def processor(job: Job[Any, None]) -> None:
        nonlocal runs
        runs += 1
        raise RuntimeError("give up")

    job = await queue.add("never", None, JobOptions(attempts=5, backoff=Backoff(type="never")))
    assert job is not None
    async with Worker(
        queue.name,
        processor,
        connection=conn,
        backoff_strategies={"never": lambda n, e: -1},
        **FAST,
    ):
        final = await wait_state(queue, job.id, "failed")
    assert runs == 1
    assert final.attempts_made == 1
    assert final.failed_reason == "give up"


async def test_unrecoverable_error_fails_at_once(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs = 0

    async def processor(job: Job[Any, None]) -> None:
        nonlocal runs
        runs += 1
        raise UnrecoverableError("bad input, do not retry")

    job = await queue.add("fatal", None, JobOptions(attempts=5))
    assert job is not None
    async with Worker(queue.name, processor, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "failed")
        await asyncio.sleep(0.2)  # a wrongly scheduled retry would run now
    assert runs == 1
    assert final.attempts_made == 1
    assert final.failed_reason == "bad input, do not retry"


async def test_discard_then_raise_is_not_retried(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs = 0

    async def processor(job: Job[Any, None]) -> None:
        nonlocal runs
        runs += 1
        job.discard()
        raise RuntimeError("discarded failure")

    job = await queue.add("discard", None, JobOptions(attempts=5))
    assert job is not None
    async with Worker(queue.name, processor, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "failed")
        await asyncio.sleep(0.2)
    assert runs == 1
    assert final.failed_reason == "discarded failure"
    assert (await queue.get_job_counts()).delayed == 0


async def test_non_serializable_return_value_fails_the_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def processor(job: Job[Any, Any]) -> Any:
        return object()

    job = await queue.add("unserializable", None)
    assert job is not None
    async with Worker(queue.name, processor, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "failed")
    assert final.failed_reason is not None
    assert "not JSON-serializable" in final.failed_reason
    assert final.returnvalue is None
    counts = await queue.get_job_counts()
    assert counts.completed == 0 and counts.failed == 1 and counts.active == 0


async def test_failed_event_fires_with_job_and_error(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    raised: list[BaseException] = []
    events: list[tuple[Job[Any, Any], BaseException]] = []

    async def processor(job: Job[Any, None]) -> None:
        exc = KeyError(f"missing {len(raised)}")
        raised.append(exc)
        raise exc

    job = await queue.add("evented", {"k": 1}, JobOptions(attempts=2))
    assert job is not None
    worker = Worker(queue.name, processor, connection=conn, **FAST)
    worker.on("failed", lambda j, e: events.append((j, e)))
    async with worker:
        await wait_state(queue, job.id, "failed")
        await wait_for(lambda: len(events) == 2)
    assert [e for _, e in events] == raised
    assert events[0][1] is raised[0] and events[1][1] is raised[1]
    assert all(j.id == job.id and j.data == {"k": 1} for j, _ in events)
    assert events[0][0].state == "retrying" and events[1][0].state == "failed"
    assert worker.failed_count == 2


async def test_job_timeout_fails_with_reason_timeout(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    starts = 0

    async def sleepy(job: Job[Any, None]) -> None:
        nonlocal starts
        starts += 1
        await asyncio.sleep(5)

    job = await queue.add("slow", None, JobOptions(timeout=100))
    assert job is not None
    async with Worker(queue.name, sleepy, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "failed", timeout=3)
    assert starts == 1
    assert final.failed_reason == "timeout"
    assert final.attempts_made == 1


async def test_job_timeout_is_retried_while_attempts_remain(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    starts = 0

    async def slow_then_fast(job: Job[Any, str]) -> str:
        nonlocal starts
        starts += 1
        if starts == 1:
            await asyncio.sleep(5)
        return "second try"

    job = await queue.add("slow", None, JobOptions(timeout=100, attempts=2))
    assert job is not None
    async with Worker(queue.name, slow_then_fast, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "completed", timeout=3)
    assert starts == 2
    assert final.attempts_made == 1
    assert final.failed_reason == "timeout"  # the reason of the failed try is kept
    assert final.returnvalue == "second try"


async def test_dead_letter_parks_final_failures(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    should_fail = True

    async def processor(job: Job[Any, str]) -> str:
        if should_fail:
            raise RuntimeError("poison")
        return "healed"

    job = await queue.add("poison", None, JobOptions(attempts=2))
    assert job is not None
    async with Worker(queue.name, processor, connection=conn, dead_letter=True, **FAST):
        final = await wait_state(queue, job.id, "failed")
        assert final.failed_reason == "poison"
        assert final.attempts_made == 2
        dead = await queue.get_dead_letter_jobs()
        assert [j.id for j in dead] == [job.id]
        counts = await queue.get_job_counts()
        assert counts.dead_letter == 1 and counts.failed == 0
        assert await queue.get_jobs("failed") == []

        should_fail = False
        assert await queue.retry_jobs(state="dead_letter") == 1
        healed = await wait_state(queue, job.id, "completed")
    assert healed.returnvalue == "healed"
    counts = await queue.get_job_counts()
    assert counts.dead_letter == 0 and counts.completed == 1 and counts.failed == 0


async def test_dead_letter_retry_puts_job_back_to_waiting(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def processor(job: Job[Any, None]) -> None:
        raise RuntimeError("poison")

    job = await queue.add("poison", None)
    assert job is not None
    async with Worker(queue.name, processor, connection=conn, dead_letter=True, **FAST):
        await wait_state(queue, job.id, "failed")
    assert await queue.retry_jobs(state="dead_letter") == 1
    back = await queue.get_job(job.id)
    assert back is not None
    assert back.state == "waiting"
    assert back.attempts_made == 0 and back.failed_reason is None
    counts = await queue.get_job_counts()
    assert counts.waiting == 1 and counts.dead_letter == 0
