"""Token streaming: a running job's chunks reach readers in order, resumable by entry id;
a follower ends when the job finished. The same on standalone Valkey, the cluster and in
memory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import JobNotFoundError, ValidationError
from tests.behaviour.conftest import Backend

TOKENS = ["Hel", "lo", ",", " wor", "ld", {"finish_reason": "stop"}]


async def _model(job: Any) -> int:
    for token in TOKENS:
        await job.stream(token)
        await asyncio.sleep(0.01)
    return len(TOKENS)


async def test_a_follower_gets_every_chunk_in_order_and_ends_with_the_job(
    backend: Backend,
) -> None:
    q = backend.queue
    job = await q.add("chat", None)
    async with backend.worker(_model):
        got = [chunk async for chunk in q.stream_job(job.id, block_ms=100)]
        assert await job.wait_until_finished(timeout=20) == "completed"
    assert got == TOKENS
    chunks = await q.read_stream(job.id)
    assert [c.data for c in chunks] == TOKENS
    assert [c.data for c in await q.read_stream(job.id, last_id=chunks[2].id)] == TOKENS[3:]
    assert await q.read_stream(job.id, last_id=chunks[-1].id, block_ms=20) == []


async def test_streaming_to_a_missing_job_or_a_bad_chunk_is_refused(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("chat", None)
    with pytest.raises(ValidationError):
        await job.stream(object())
    with pytest.raises(ValidationError):
        await q.read_stream(job.id, last_id="latest")
    assert await q.read_stream(job.id) == []
    await job.remove()
    with pytest.raises(JobNotFoundError):
        await job.stream("x")
