"""Job streams in memory: what wire.features.stream_chunk and the stream reads do, for
TestJob.stream, TestQueue.read_stream and TestQueue.stream_job. Chunks are kept (capped at
STREAM_MAX_LEN) until the queue is obliterated; there is no expiry in memory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from ..errors import JobNotFoundError, ValidationError
from ..streams import STREAM_MAX_LEN, StreamChunk, check_read, encode_chunk
from .store import QueueStore

__all__ = ["append", "follow", "read"]


def _key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def append(store: QueueStore, job_id: str, chunk: Any) -> str:
    """Add a chunk to the job's stream; its entry id."""
    raw = encode_chunk(chunk)
    if job_id not in store.jobs:
        raise JobNotFoundError(store.name, job_id)
    entries = store.job_streams.setdefault(job_id, [])
    ms = store.clock.now_ms()
    last = _key(entries[-1][0]) if entries else (0, 0)
    entry_id = f"{ms}-0" if ms > last[0] else f"{last[0]}-{last[1] + 1}"
    entries.append((entry_id, raw))
    del entries[:-STREAM_MAX_LEN]
    store.notify()
    return entry_id


def _after(store: QueueStore, job_id: str, last: str) -> list[StreamChunk]:
    after = _key(last)
    return [
        StreamChunk(i, orjson.loads(raw))
        for i, raw in store.job_streams.get(job_id, [])
        if _key(i) > after
    ]


async def read(
    store: QueueStore, job_id: str, last_id: str | None, block_ms: int | None
) -> list[StreamChunk]:
    """Chunks after `last_id`; with `block_ms`, waits for one that long (0: forever)."""
    last = check_read(last_id, block_ms)
    found = _after(store, job_id, last)
    if found or block_ms is None:
        return found
    timeout = None if block_ms == 0 else block_ms / 1000
    await store.changed(timeout)
    return _after(store, job_id, last)


async def follow(
    store: QueueStore, job_id: str, last_id: str | None, block_ms: int
) -> AsyncIterator[Any]:
    """The chunks until the job finished (or is gone) and every chunk was read."""
    last = check_read(last_id, block_ms)
    if block_ms < 1:
        raise ValidationError("block_ms", "must be >= 1: the state is checked between waits")
    while True:
        chunks = _after(store, job_id, last)
        for chunk in chunks:
            last = chunk.id
            yield chunk
        if chunks:
            continue
        rec = store.jobs.get(job_id)
        if rec is None or rec.state in ("completed", "failed"):
            for chunk in _after(store, job_id, last):
                yield chunk
            return
        await store.changed(block_ms / 1000)
