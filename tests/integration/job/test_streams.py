"""Token streaming: Job.stream, Queue.read_stream, Queue.stream_job; bounded length and
expiry; blocking reads off the command client; streaming to add_and_wait callers.
Standalone and cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, JobNotFoundError, Queue, ValidationError, Worker
from glidemq.job.streams import STREAM_TTL_MS, stream_key
from tests.helpers import FAST

WORDS = ["The", " quick", " brown", " fox", " jumps", {"done": True}]


async def chatty(job: Job[Any, Any]) -> str:
    """A fake model: streams its words with a pause between them."""
    for word in WORDS:
        await job.stream(word)
        await asyncio.sleep(job.data.get("pause", 0.02))
    return "".join(w for w in WORDS if isinstance(w, str))


async def test_stream_job_follows_every_chunk_in_order_until_the_job_finishes(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("chat", {"pause": 0.05})
    got: list[Any] = []
    async with Worker(queue.name, chatty, connection=conn, **FAST):
        async for chunk in queue.stream_job(job.id, block_ms=200):
            got.append(chunk)
    assert got == WORDS
    assert await job.get_state() == "completed"
    # the stream is still there after the job finished, bounded in time
    client = (await queue._context()).client
    ttl = await client.pttl(stream_key(queue.keys, job.id))
    assert 0 < ttl <= STREAM_TTL_MS
    # following a finished job replays what is kept, then ends
    assert [c async for c in queue.stream_job(job.id, block_ms=100)] == WORDS


async def test_read_stream_resumes_after_last_id_and_blocking_reads_leave_commands_free(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("chat", {"pause": 0})
    first = await job.stream("a")
    await job.stream({"b": 1})
    chunks = await queue.read_stream(job.id)
    assert [c.data for c in chunks] == ["a", {"b": 1}] and chunks[0].id == first
    assert [c.data for c in await queue.read_stream(job.id, last_id=first)] == [{"b": 1}]
    assert await queue.read_stream(job.id, last_id=chunks[-1].id) == []

    # a blocking read waits for the next chunk while the queue's other calls go on
    reader = asyncio.create_task(queue.read_stream(job.id, chunks[-1].id, block_ms=10_000))
    await asyncio.sleep(0.2)
    assert not reader.done()
    counts = await asyncio.wait_for(queue.get_job_counts(), timeout=5)
    assert counts.waiting == 1
    await job.stream("c")
    late = await asyncio.wait_for(reader, timeout=10)
    assert [c.data for c in late] == ["c"]
    assert await queue.read_stream(job.id, chunks[-1].id, block_ms=50) == [late[0]]


async def test_add_and_wait_callers_can_follow_the_stream(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with Worker(queue.name, chatty, connection=conn, **FAST):
        waiting = asyncio.create_task(
            queue.add_and_wait("chat", {"pause": 0.05}, {"job_id": "conv-1"}, timeout=30)
        )
        got = [c async for c in queue.stream_job("conv-1", block_ms=200)]
        assert await waiting == "The quick brown fox jumps"
    assert got == WORDS


async def test_the_stream_is_capped_and_bad_chunks_write_nothing(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("chat", None)
    ctx = await queue._context()
    key = stream_key(queue.keys, job.id)
    for i in range(8):
        await ctx.fcall(
            "glidemq_streamChunk", [queue.keys.job(job.id), key], ["5", "60000", str(i)]
        )
    assert [c.data for c in await queue.read_stream(job.id)] == [3, 4, 5, 6, 7]
    with pytest.raises(ValidationError):
        await job.stream({1, 2})  # a set is not JSON
    with pytest.raises(ValidationError):
        await queue.read_stream(job.id, last_id="nope")
    with pytest.raises(ValidationError):
        await queue.read_stream(job.id, block_ms=-1)
    await job.remove()
    await ctx.command(lambda c: c.delete([key]))
    with pytest.raises(JobNotFoundError):
        await job.stream("late")
    assert await ctx.command(lambda c: c.exists([key])) == 0
