"""Token streaming: a running job appends chunks to a stream of its own; callers read or
follow it while the job runs.

`Job.stream` is one server call (`wire.features.stream_chunk`) on the key `jstream:{id}` under
the queue's hash tag: capped at `STREAM_MAX_LEN` chunks and expiring `STREAM_TTL_MS` after
its last chunk. Blocking reads never use the queue's command client: a blocking read stalls
every other command of its client, so they run on a client of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glide import StreamReadOptions

from ..client.connection import Client, close_client, create_client
from ..encoding.serialize import decode_json, encode_json
from ..errors import PayloadTooLargeError, ValidationError

if TYPE_CHECKING:
    from ..client.connection import ConnectionOptions
    from ..client.context import QueueContext
    from ..keys import QueueKeys

__all__ = [
    "STREAM_MAX_LEN",
    "STREAM_TTL_MS",
    "StreamChunk",
    "encode_chunk",
]

STREAM_MAX_LEN = 10_000
"""How many chunks a job's stream keeps (older ones are trimmed)."""
STREAM_TTL_MS = 3_600_000
"""A job's stream expires this long after its last chunk (1 hour)."""
MAX_CHUNK_BYTES = 1_048_576
_FINISHED = (b"completed", b"failed")
MISSING_GRACE_MS = 5_000
"""`stream_job` on a job that does not exist (yet) waits this long for it before it ends."""


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One chunk of a job's stream: its entry id (to resume after) and what was streamed."""

    id: str
    data: Any


def encode_chunk(chunk: object) -> bytes:
    """A chunk as stored: JSON. ValidationError if it is not serializable or holds NaN or
    Infinity, PayloadTooLargeError past 1 MiB."""
    try:
        raw = encode_json(chunk, "chunk")  # NaN and Infinity refused, as in job data
    except TypeError as exc:
        raise ValidationError("chunk", f"not JSON-serializable: {exc}") from exc
    if len(raw) > MAX_CHUNK_BYTES:
        raise PayloadTooLargeError(len(raw), MAX_CHUNK_BYTES, "chunk")
    return raw


def stream_key(keys: QueueKeys, job_id: str) -> str:
    """Key of the job's chunk stream."""
    return f"{keys.base}jstream:{job_id}"


def check_read(last_id: object, block_ms: object) -> str:
    """`last_id` as an entry id to read after ('0-0': from the start)."""
    if last_id is None:
        last = "0-0"
    elif not isinstance(last_id, str) or not _entry_id(last_id):
        raise ValidationError("last_id", f"must be a stream entry id like '1-0', got {last_id!r}")
    else:
        last = last_id
    if block_ms is not None and (
        isinstance(block_ms, bool) or not isinstance(block_ms, int) or block_ms < 0
    ):
        raise ValidationError("block_ms", "must be an integer >= 0 or None")
    return last


def _entry_id(text: str) -> bool:
    ms, sep, seq = text.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit()


def parse_chunks(reply: Any) -> list[StreamChunk]:
    """XREAD's reply for one stream as chunks, in order."""
    out: list[StreamChunk] = []
    if not reply:
        return out
    for entries in reply.values():
        for entry_id, pairs in entries.items():
            value = next((v for f, v in pairs if f == b"c"), None)
            eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            out.append(StreamChunk(eid, decode_json(value) if value is not None else None))
    return out


async def read_chunks(
    client: Client, key: str, last: str, block_ms: int | None
) -> list[StreamChunk]:
    """Up to 1,000 chunks of stream `key` after `last`; `block_ms` waits for one (None: no
    wait). A blocking read needs a client of its own."""
    opts = StreamReadOptions(block_ms=block_ms, count=1000)
    return parse_chunks(await client.xread({key: last}, opts))


class QueueStreams:
    """Reading jobs' chunk streams; part of `Queue`."""

    keys: QueueKeys
    connection: ConnectionOptions
    _blocking: Client | None
    _blocking_lock: asyncio.Lock | None

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    async def read_stream(
        self, job_id: str, last_id: str | None = None, block_ms: int | None = None
    ) -> list[StreamChunk]:
        """Chunks of job `job_id` after `last_id` (None: from the first kept). With `block_ms`,
        waits up to that long (0: forever) for one when there is none yet; such reads use a
        connection of their own and take turns."""
        last = check_read(last_id, block_ms)
        ctx = await self._context()
        key = stream_key(self.keys, job_id)
        if block_ms is None:
            result: list[StreamChunk] = await ctx.command(lambda c: read_chunks(c, key, last, None))
            return result
        if self._blocking_lock is None:
            self._blocking_lock = asyncio.Lock()
        async with self._blocking_lock:
            if self._blocking is None:
                self._blocking = await create_client(
                    self.connection, name=f"glidemq-streams-{self.keys.name}"
                )
            return await read_chunks(self._blocking, key, last, block_ms)

    async def stream_job(
        self, job_id: str, *, last_id: str | None = None, block_ms: int = 1000
    ) -> AsyncIterator[Any]:
        """Follow job `job_id`'s stream: yields each chunk's data, in order, until the job has
        finished and every chunk was read (or it was removed). Uses a connection of its own,
        closed when the iteration ends; `block_ms` bounds each wait for new chunks."""
        follow = self.follow_stream(job_id, last_id=last_id, block_ms=block_ms)
        async with contextlib.aclosing(follow):
            async for chunk in follow:
                yield chunk.data

    async def follow_stream(
        self, job_id: str, *, last_id: str | None = None, block_ms: int = 1000
    ) -> AsyncGenerator[StreamChunk, None]:
        """As `stream_job`, but yields each `StreamChunk` (its id too, to resume after)."""
        last = check_read(last_id, block_ms)
        if block_ms < 1:
            raise ValidationError(
                "block_ms", "must be >= 1 here: the job's state is checked between waits"
            )
        ctx = await self._context()
        key, job_key = stream_key(self.keys, job_id), self.keys.job(job_id)
        client = await create_client(self.connection, name=f"glidemq-stream-{self.keys.name}")
        missing_since: float | None = None
        try:
            while True:
                chunks = await read_chunks(client, key, last, block_ms)
                for chunk in chunks:
                    last = chunk.id
                    yield chunk
                if chunks:
                    continue
                state = await ctx.command(lambda c: c.hget(job_key, "state"))
                if state is None:
                    now = time.monotonic()
                    missing_since = missing_since or now
                    if (now - missing_since) * 1000 < MISSING_GRACE_MS:
                        continue
                elif state not in _FINISHED:
                    missing_since = None
                    continue
                # finished (or gone): what was streamed before is all there is
                while chunks := await read_chunks(client, key, last, None):
                    for chunk in chunks:
                        last = chunk.id
                        yield chunk
                return
        finally:
            await close_client(client)

    async def _close_streams(self) -> None:
        client, self._blocking = self._blocking, None
        await close_client(client)
