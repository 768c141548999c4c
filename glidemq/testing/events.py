"""TestQueueEvents: the QueueEvents API over an in-memory queue's events."""

from __future__ import annotations

import asyncio

from ..events import EventFeed, QueueEvent
from ..keys import DEFAULT_PREFIX
from .server import MemoryConnection, MemoryServer, resolve_server
from .store import Event

__all__ = ["TestQueueEvents"]


def _position(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0


class TestQueueEvents(EventFeed):
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
        super().__init__(name, prefix, last_id, block_timeout, buffer_size)
        self.server: MemoryServer = resolve_server(connection)
        self.connection = self.server
        self._store = self.server.store(name, prefix)

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

    def _deliver(self, entry: Event) -> None:
        if self._queue is None or self._closed:
            return
        entry_id, event, job_id, fields = entry
        self.last_id = entry_id
        self._publish(QueueEvent(entry_id, event, job_id, dict(fields)))

    async def close(self) -> None:
        """Stop following. Idempotent."""
        self._closed = True
        if self._deliver in self._store.event_listeners:
            self._store.event_listeners.remove(self._deliver)
