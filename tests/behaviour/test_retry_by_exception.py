"""`raise glidemq.Retry(delay=ms)`: the job runs again after the delay, counting an attempt,
and fails with the retry's reason once no attempt is left."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import Backoff, Job, JobOptions, Retry, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state


async def test_retry_runs_the_job_again_after_its_delay(backend: Backend) -> None:
    runs: list[int] = []

    async def flaky(job: Any) -> str:
        runs.append(backend.now_ms())
        if len(runs) == 1:
            raise Retry(delay=1500, reason="rate limited upstream")
        return "done"

    # the backoff would retry at once: Retry's own delay wins
    opts = JobOptions(attempts=3, backoff=Backoff("fixed", 0))
    job = await backend.queue.add("call", {"n": 1}, opts)
    assert job is not None
    async with backend.worker(flaky):
        await wait_state(backend.queue, job.id, "delayed")
        stored = await backend.queue.get_job(job.id)
        assert stored is not None
        assert stored.attempts_made == 1 and stored.failed_reason == "rate limited upstream"
        await backend.elapse(1500)
        await wait_state(backend.queue, job.id, "completed")
    assert len(runs) == 2 and runs[1] - runs[0] >= 1500


async def test_retry_without_attempts_left_fails_the_job(backend: Backend) -> None:
    async def always(job: Any) -> None:
        raise Retry(delay=10)

    job = await backend.queue.add("call", None, JobOptions(attempts=2))
    assert job is not None
    async with backend.worker(always) as worker:
        await wait_for(lambda: worker.failed_count == 1)
        await backend.elapse(20)
        await wait_for(lambda: worker.failed_count == 2)
        await wait_state(backend.queue, job.id, "failed")
    stored = await backend.queue.get_job(job.id)
    assert stored is not None and stored.failed_reason == "retry requested"


def test_a_bad_delay_is_refused() -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValidationError):
            Retry(delay=bad)  # type: ignore[arg-type]
    assert Retry().delay is None


async def test_each_failed_try_is_kept_with_its_reason_and_a_retry_by_hand_clears_them(
    backend: Backend,
) -> None:
    async def always(job: Job[Any, Any]) -> None:
        await job.log(f"try {job.attempts_made + 1}")
        raise ValueError(f"no {job.attempts_made + 1}")

    job = await backend.queue.add("x", {}, {"attempts": 2})
    assert job is not None
    async with backend.worker(always):
        await wait_state(backend.queue, job.id, "failed")
    stored = await backend.queue.get_job(job.id)
    assert stored is not None
    assert [(f["attempt"], f["reason"], f["logs"]) for f in stored.failures] == [
        (1, "no 1", 1), (2, "no 2", 2),
    ]  # fmt: skip
    assert all("ValueError" in f["stack"] for f in stored.failures)
    await stored.retry()
    again = await backend.queue.get_job(job.id)
    assert again is not None and again.failures == [] and again.state == "waiting"


async def test_a_traceback_cut_inside_a_character_keeps_the_failed_tries_readable(
    backend: Backend,
) -> None:
    async def wide(job: Job[Any, Any]) -> None:
        raise ValueError("失敗" * 3000)  # the stored traceback is cut at a byte count

    job = await backend.queue.add("x", {}, {"attempts": 1})
    assert job is not None
    async with backend.worker(wide):
        await wait_state(backend.queue, job.id, "failed")
    stored = await backend.queue.get_job(job.id)
    assert stored is not None and [f["attempt"] for f in stored.failures] == [1]
    assert stored.failures[0]["reason"].startswith("失敗")
