"""Fallback chains: each retry of a job sees the next entry of its `fallbacks` option as
`job.current_fallback` (None on the first try); when the chain is used up the job fails as
any job does. The same on standalone Valkey, the cluster and in memory."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import JobOptions, ValidationError
from tests.behaviour.conftest import Backend

CHAIN = [
    {"model": "big", "provider": "a"},
    {"model": "medium", "provider": "b"},
    {"model": "small"},
]


def _processor(works_with: str | None) -> Any:
    async def call_model(job: Any) -> Any:
        fb = job.current_fallback
        model = fb["model"] if fb else job.data["model"]
        job_tries.append((job.attempts_made, fb))
        if model != works_with:
            raise RuntimeError(f"{model} is unavailable")
        return model

    job_tries: list[Any] = []
    call_model.tries = job_tries  # type: ignore[attr-defined]
    return call_model


async def test_each_retry_uses_the_next_fallback(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("chat", {"model": "huge"}, {"fallbacks": CHAIN})
    assert job.opts["fallbacks"] == CHAIN and job.max_attempts == 4
    proc = _processor("medium")
    async with backend.worker(proc):
        assert await job.wait_until_finished(timeout=20) == "completed"
    assert job.returnvalue == "medium"
    assert proc.tries == [(0, None), (1, CHAIN[0]), (2, CHAIN[1])]
    assert job.current_fallback == CHAIN[1]


async def test_an_exhausted_chain_fails_the_job(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("chat", {"model": "huge"}, JobOptions(fallbacks=CHAIN[:2]))
    proc = _processor(None)
    async with backend.worker(proc):
        assert await job.wait_until_finished(timeout=20) == "failed"
    assert [t[1] for t in proc.tries] == [None, CHAIN[0], CHAIN[1]]
    assert job.failed_reason == "medium is unavailable"
    assert job.attempts_made == 3


async def test_bad_fallbacks_are_refused(backend: Backend) -> None:
    for bad in ("big", [{"provider": "a"}], [{"model": ""}], [{"model": "m", "x": 1}], [3]):
        with pytest.raises(ValidationError):
            await backend.queue.add("chat", None, {"fallbacks": bad})
    assert (await backend.queue.get_job_counts()).waiting == 0
