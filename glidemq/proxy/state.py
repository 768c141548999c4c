"""What the proxy holds for its life: the admin session (every read and action, on one
connection), a bounded pool of `Queue`s for the writes that may create a queue (adds,
schedulers, stream reads, signals), one `FlowProducer`, the shared feeds of the event
streams with the gate that bounds how many are open, and the queue allowlist.

Callers choose the queue names, so nothing here may grow with them: the pool keeps at most
`max_queues` queues open (each has its own connections), closes the least recently used
idle one to make room and any left idle for `_IDLE_S`, and answers 503 (`Busy`) while every
open queue is in use by a request."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from starlette.requests import Request

from ..admin.session import Admin
from ..client.connection import ConnectionLike, resolve_connection
from ..errors import GlideMQError, ValidationError
from ..flows.flow import FlowProducer
from ..keys import DEFAULT_PREFIX, validate_prefix, validate_queue_name
from ..queue.queue import Queue
from ..web.capacity import DEFAULT_MAX_STREAMS, StreamGate
from .feeds import Feeds

__all__ = [
    "DEFAULT_MAX_QUEUES",
    "DEFAULT_MAX_STREAMS",
    "Busy",
    "Forbidden",
    "Proxy",
    "QueuePool",
    "proxy_of",
]

DEFAULT_MAX_QUEUES = 16
"""Queues the proxy keeps open at once (each holds one to three server connections)."""
_IDLE_S = 60.0  # an open queue no request used for this long is closed
_WAIT_S = 5.0  # how long a request waits for an open queue to become idle before 503


class Forbidden(GlideMQError):
    """A queue (or broadcast) outside the proxy's allowlist; answered with 403."""

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} is not served by this proxy")
        self.name = name


class Busy(GlideMQError):
    """Every queue the proxy may keep open is in use by a request; answered with 503."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"all {limit} open queues are in use by requests; try again")
        self.limit = limit


class _Open:
    __slots__ = ("queue", "used_at", "users")

    def __init__(self, queue: Queue[Any, Any]) -> None:
        self.queue = queue
        self.users = 0
        self.used_at = time.monotonic()


class QueuePool:
    """At most `size` open `Queue`s made by `make(name)`, least recently used first out."""

    def __init__(self, make: Callable[[str], Queue[Any, Any]], size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValidationError("max_queues", "must be a whole number >= 1")
        self.make = make
        self.size = size
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._freed = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.asynccontextmanager
    async def using(self, name: str) -> AsyncIterator[Queue[Any, Any]]:
        """The open queue `name` for the duration of the block (opened when needed)."""
        entry = self._open.get(name)
        if entry is None:
            await self._make_room()
            entry = self._open.get(name)  # another request may have opened it meanwhile
            if entry is None:
                entry = self._open[name] = _Open(self.make(name))
        self._open.move_to_end(name)
        entry.users += 1
        try:
            yield entry.queue
        finally:
            entry.users -= 1
            entry.used_at = time.monotonic()
            self._freed.set()

    async def _make_room(self) -> None:
        deadline = time.monotonic() + _WAIT_S
        while True:
            now = time.monotonic()
            for name, entry in list(self._open.items()):
                if entry.users == 0 and now - entry.used_at >= _IDLE_S:
                    self._close(name)
            if len(self._open) < self.size:
                return
            idle = next((n for n, e in self._open.items() if e.users == 0), None)
            if idle is not None:
                self._close(idle)
                return
            left = deadline - now
            if left <= 0:
                raise Busy(self.size)
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), left)

    def _close(self, name: str) -> None:
        entry = self._open.pop(name)
        task = asyncio.get_running_loop().create_task(entry.queue.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every open queue. Idempotent."""
        queues = [e.queue for e in self._open.values()]
        self._open.clear()
        await asyncio.gather(
            *(q.close() for q in queues), *list(self._closing), return_exceptions=True
        )


class Proxy:
    """The proxy's connections to one server under one key prefix. Connects lazily;
    `close()` when done (the app's lifespan does it when served alone)."""

    def __init__(
        self,
        connection: ConnectionLike = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        queues: Sequence[str] | None = None,
        max_wait: float = 300.0,
        max_queues: int = DEFAULT_MAX_QUEUES,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        self.connection = resolve_connection(connection)
        self.prefix = validate_prefix(prefix)
        self.allowed = (
            frozenset(validate_queue_name(q) for q in queues) if queues is not None else None
        )
        if self.allowed is not None and not self.allowed:
            raise ValidationError("queues", "name at least one queue, or None for every queue")
        self.max_wait = max_wait
        self.admin = Admin(self.connection, prefix=self.prefix)
        self.queues = QueuePool(self._make_queue, max_queues)
        self.streams = StreamGate(max_streams, log="glidemq.proxy")
        """Admits the event streams: at most `max_streams` open at once."""
        self.feeds = Feeds(self.connection, self.prefix, self.admin)
        """One reader per queue (and per broadcast subscription) with open streams."""
        self._flows: FlowProducer | None = None
        self._lock = asyncio.Lock()

    def check(self, name: object) -> str:
        """`name` if it is a valid queue name this proxy serves; ValidationError (400) or
        Forbidden (403) otherwise."""
        queue = validate_queue_name(name)
        if self.allowed is not None and queue not in self.allowed:
            raise Forbidden(queue)
        return queue

    def check_all(self, names: Iterable[object]) -> None:
        """`check` every name."""
        for name in names:
            self.check(name)

    def _make_queue(self, name: str) -> Queue[Any, Any]:
        return Queue(name, connection=self.connection, prefix=self.prefix)

    def using(self, name: str) -> contextlib.AbstractAsyncContextManager[Queue[Any, Any]]:
        """`async with proxy.using(name) as queue`: the proxy's `Queue` for `name` (already
        checked) while the block runs; `Busy` when none can be opened now."""
        return self.queues.using(name)

    @property
    def flows(self) -> FlowProducer:
        """The proxy's FlowProducer."""
        if self._flows is None:
            self._flows = FlowProducer(connection=self.connection, prefix=self.prefix)
        return self._flows

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        flows, self._flows = self._flows, None
        await asyncio.gather(
            self.feeds.close(),
            self.admin.close(),
            self.queues.close(),
            *([flows.close()] if flows is not None else []),
            return_exceptions=True,
        )


def proxy_of(request: Request) -> Proxy:
    """The Proxy serving `request`."""
    proxy: Proxy = request.app.state.proxy
    return proxy
