"""Tokens-per-minute limiting: a worker's token_limiter is charged by report_usage; once a
window's tokens are used up no job starts until the window ends, and every job still runs.
The same on standalone Valkey, the cluster and in memory."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import TokenLimiter, ValidationError, WorkerOptions
from tests.behaviour.conftest import Backend

WINDOW = 1000


async def test_a_full_token_window_holds_jobs_back_until_it_ends(backend: Backend) -> None:
    q = backend.queue
    started: list[int] = []

    async def call(job: Any) -> None:
        started.append(backend.now_ms())
        await job.report_usage(model="m", tokens={"input": 6, "output": 4})

    jobs = [await q.add("chat", i) for i in range(5)]
    limiter = TokenLimiter(max_tokens=30, duration_ms=WINDOW)
    async with backend.worker(call, token_limiter=limiter, limiter={"max": 1000, "duration": 1000}):
        for _ in range(200):
            if len(started) == 5 and (await q.get_job_counts()).completed == 5:
                break
            await backend.elapse(100)
    assert len(started) == 5 and (await q.get_job_counts()).completed == 5
    # three jobs fill the window (30 tokens); the fourth starts only after it ended
    assert started[3] - started[0] >= WINDOW
    for job in jobs:
        await job.refresh()
        assert job.state == "completed"


def test_bad_token_limiters_are_refused() -> None:
    for bad in ({"max_tokens": 0}, {"max_tokens": 5, "duration_ms": 0}, {"max": 5}, 7):
        with pytest.raises(ValidationError):
            WorkerOptions(token_limiter=bad)  # type: ignore[arg-type]
