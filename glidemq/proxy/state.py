"""What the proxy holds for its life: the admin session (every read and action, on one
connection), one `Queue` per queue it added to or set a scheduler on (the writes that may
create a queue), one `FlowProducer`, and the queue allowlist."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.requests import Request

from ..admin.session import Admin
from ..connection import ConnectionLike, resolve_connection
from ..errors import GlideMQError, ValidationError
from ..flow import FlowProducer
from ..keys import DEFAULT_PREFIX, validate_prefix, validate_queue_name
from ..queue import Queue

__all__ = ["Forbidden", "Proxy", "proxy_of"]


class Forbidden(GlideMQError):
    """A queue (or broadcast) outside the proxy's allowlist; answered with 403."""

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} is not served by this proxy")
        self.name = name


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
        self._queues: dict[str, Queue[Any, Any]] = {}
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

    def queue(self, name: str) -> Queue[Any, Any]:
        """The proxy's `Queue` for `name` (already checked), made on first use."""
        q = self._queues.get(name)
        if q is None:
            q = Queue(name, connection=self.connection, prefix=self.prefix)
            self._queues[name] = q
        return q

    @property
    def flows(self) -> FlowProducer:
        """The proxy's FlowProducer."""
        if self._flows is None:
            self._flows = FlowProducer(connection=self.connection, prefix=self.prefix)
        return self._flows

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        queues, self._queues = list(self._queues.values()), {}
        flows, self._flows = self._flows, None
        await asyncio.gather(
            self.admin.close(),
            *(q.close() for q in queues),
            *([flows.close()] if flows is not None else []),
            return_exceptions=True,
        )


def proxy_of(request: Request) -> Proxy:
    """The Proxy serving `request`."""
    proxy: Proxy = request.app.state.proxy
    return proxy
