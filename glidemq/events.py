"""QueueEvents: a reader of a queue's events stream, on a blocking client of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from glide import GlideError, MaxId, MinId, StreamReadOptions

from .client.connection import (
    Client,
    ConnectionLike,
    close_client,
    create_client,
    resolve_connection,
)
from .client.renewal import Renewal
from .client.retry import to_glidemq_error
from .emitter import Emitter
from .errors import GlideMQError
from .keys import DEFAULT_PREFIX, QueueKeys

__all__ = ["EventFeed", "QueueEvent", "QueueEvents", "parse_event"]


@dataclass(frozen=True, slots=True)
class QueueEvent:
    """One lifecycle event: `event` (added, active, completed, failed, retrying, progress,
    stalled, removed, paused, resumed, ...), the job id if any, and the other fields."""

    id: str
    event: str
    job_id: str | None
    fields: dict[str, str] = field(default_factory=dict)


def parse_event(entry_id: bytes, pairs: Sequence[Sequence[bytes]]) -> QueueEvent:
    """The event of one entry of the events stream (its id and field/value pairs)."""
    fields = {k.decode(): v.decode(errors="replace") for k, v in pairs}
    return QueueEvent(entry_id.decode(), fields.pop("event", ""), fields.pop("jobId", None), fields)


class EventFeed:
    """What every follower of a queue's events offers, whatever engine writes them:
    `on(event, handler)`, `next()`, `async for`, `async with`. Up to `buffer_size` unread
    events are kept for `next()` and iteration; past that the oldest are dropped and counted
    in `dropped`. Subclasses say how events arrive (`start`, `close`, then `_publish`)."""

    def __init__(
        self, name: str, prefix: str, last_id: str, block_timeout: int, buffer_size: int
    ) -> None:
        self.keys = QueueKeys(name, prefix)
        self.name = name
        self.last_id = last_id
        self.block_timeout = block_timeout
        self.events = Emitter(f"events of queue {name}")
        self.buffer_size = buffer_size
        self.dropped = 0
        self._queue: asyncio.Queue[QueueEvent] | None = None
        self._closed = False

    async def start(self) -> None:
        """Start following."""
        raise NotImplementedError

    async def close(self) -> None:
        """Stop following. Idempotent."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Call `handler(QueueEvent)` for every event of this name ("*" for all)."""
        return self.events.on(event, handler)

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def _publish(self, ev: QueueEvent) -> None:
        """Hand one event to the buffer and the handlers."""
        queue = self._queue
        assert queue is not None
        if queue.full():  # nobody is reading: keep the newest events
            queue.get_nowait()
            self.dropped += 1
        queue.put_nowait(ev)
        self.events.emit(ev.event, ev)
        self.events.emit("*", ev)

    async def __aiter__(self) -> AsyncIterator[QueueEvent]:
        await self.start()
        assert self._queue is not None
        while not self._closed:
            yield await self._queue.get()

    async def next(self, timeout: float | None = None) -> QueueEvent:
        """The next event (waiting at most `timeout` seconds)."""
        await self.start()
        assert self._queue is not None
        return await asyncio.wait_for(self._queue.get(), timeout)


class QueueEvents(EventFeed):
    """Follow a queue's events, from now on (or from `last_id`).

    Use `on("completed", handler)` and `start()`, or iterate: `async for ev in events`.
    For iteration, up to `buffer_size` unread events are kept; past that the oldest are
    dropped and counted in `dropped`.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        last_id: str = "$",
        block_timeout: int = 1000,
        buffer_size: int = 10_000,
    ) -> None:
        super().__init__(name, prefix, last_id, block_timeout, buffer_size)
        self.connection = resolve_connection(connection)
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect and start reading. Events written after this call are delivered."""
        if self._client is not None:
            return
        self._client = await create_client(self.connection, name=f"glidemq-events-{self.name}")
        if self.last_id == "$":
            # Pin the position now, so nothing between start() and the first read is missed.
            try:
                info = await self._client.xrevrange(self.keys.events, MaxId(), MinId(), 1)
            except GlideError as exc:
                await close_client(self._client)
                self._client = None
                raise to_glidemq_error(exc, "events: reading the last id") from exc
            self.last_id = self._last(info)
        self._queue = asyncio.Queue(self.buffer_size)
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @staticmethod
    def _last(info: Any) -> str:
        if isinstance(info, dict) and info:
            first: bytes = next(iter(info))
            return first.decode()
        return "0-0"

    async def _renew_client(self) -> None:
        try:
            client = await create_client(self.connection, name=f"glidemq-events-{self.name}")
        except GlideMQError:
            return  # the read loop tries again later
        if self._client is None:  # closed meanwhile
            await close_client(client)
            return
        old, self._client = self._client, client
        await close_client(old)

    async def _read_loop(self) -> None:
        backoff = 0.05
        # valkey-glide never notices a connection gone silent: after reads kept failing for
        # longer than one read may take, a new client replaces it (once the server answers).
        renewal = Renewal(self.connection, self._renew_client)
        renewal.stale_after += self.block_timeout / 1000
        while self._client is not None:
            try:
                reply = await self._client.xread(
                    {self.keys.events: self.last_id},
                    StreamReadOptions(block_ms=self.block_timeout, count=500),
                )
                backoff = 0.05
                renewal.ok()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.closed:
                    return
                self.events.emit("error", GlideMQError(f"events read failed: {exc}"))
                await renewal.failed()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if not reply:
                continue
            for entries in reply.values():
                for entry_id, pairs in entries.items():
                    ev = parse_event(entry_id, pairs)
                    self.last_id = ev.id
                    self._publish(ev)

    async def close(self) -> None:
        """Stop reading and close the connection. Idempotent."""
        self._closed = True
        client, self._client = self._client, None
        await close_client(client)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
