"""TestQueueEvents: the QueueEvents API over an in-memory queue's events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Self

from ..emitter import Emitter
from ..events import QueueEvent
from ..keys import DEFAULT_PREFIX, QueueKeys
from .server import MemoryConnection, MemoryServer, resolve_server
from .store import Event

__all__ = ["TestQueueEvents"]


def _position(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0


class TestQueueEvents:
    """Follow an in-memory queue's events, from now on (or from `last_id`): the same
    `on(...)`, `next()` and `async for` as `glidemq.QueueEvents`, with the same event names
    and fields. Events are delivered as they happen, without a reader task."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        name: str,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        last_id: str = "$",
        block_timeout: int = 1000,
        buffer_size: int = 10_000,
    ) -> None:
        self.keys = QueueKeys(name, prefix)
        self.name = name
        self.server: MemoryServer = resolve_server(connection)
        self.connection = self.server
        self.last_id = last_id
        self.block_timeout = block_timeout
        self.events = Emitter()
        self.buffer_size = buffer_size
        self.dropped = 0
        self._store = self.server.store(name, prefix)
        self._queue: asyncio.Queue[QueueEvent] | None = None
        self._closed = False

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

    async def start(self) -> None:
        """Start following. Events added after this call are delivered."""
        if self._queue is not None:
            return
        self._queue = asyncio.Queue(self.buffer_size)
        if self.last_id != "$":
            since = _position(self.last_id)
            for entry in list(self._store.events):
                if _position(entry[0]) > since:
                    self._deliver(entry)
        self._store.event_listeners.append(self._deliver)

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    def _deliver(self, entry: Event) -> None:
        if self._queue is None or self._closed:
            return
        entry_id, event, job_id, fields = entry
        self.last_id = entry_id
        ev = QueueEvent(entry_id, event, job_id, dict(fields))
        if self._queue.full():  # nobody is reading: keep the newest events
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(ev)
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

    async def close(self) -> None:
        """Stop following. Idempotent."""
        self._closed = True
        if self._deliver in self._store.event_listeners:
            self._store.event_listeners.remove(self._deliver)
