"""Queues for a Starlette or FastAPI app: opened once at startup, closed at shutdown.

    queues = GlideMQ(["emails"], connection="valkey://localhost:6379")
    app = FastAPI(lifespan=queues.lifespan)

    Emails = Annotated[Queue, Depends(queues.dependency("emails"))]

    @app.post("/signup")
    async def signup(queue: Emails): ...

In Starlette, `queues.queue("emails")` or `GlideMQ.of(request.app).queue("emails")`
inside an endpoint. Needs Starlette (FastAPI brings it).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from starlette.requests import Request

from ..client.connection import ConnectionLike, resolve_connection
from ..errors import GlideMQError, ValidationError
from ..keys import DEFAULT_PREFIX
from ..queue.queue import Queue

__all__ = ["GlideMQ"]

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


class GlideMQ:
    """The app's queues by name. Startup connects each (one connection per queue, as a
    `Queue` has), so a server that cannot be reached fails the startup, not the first
    request; shutdown closes them. `lifespan` wraps the app's own lifespan, if given."""

    def __init__(
        self,
        queues: Iterable[str],
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        result_ttl: int | None = None,
        lifespan: Lifespan | None = None,
    ) -> None:
        if isinstance(queues, str):
            raise ValidationError("queues", "expected a list of queue names, not one string")
        self.names = list(dict.fromkeys(queues))
        if not self.names:
            raise ValidationError("queues", "name at least one queue")
        self.connection = resolve_connection(connection)
        self.prefix = prefix
        self.compression = compression
        self.result_ttl = result_ttl
        self._inner = lifespan
        self._queues: dict[str, Queue[Any, Any]] = {}

    @staticmethod
    def of(app: Any) -> GlideMQ:
        """The GlideMQ whose lifespan runs `app` (set on `app.state.glidemq` at startup)."""
        found = getattr(getattr(app, "state", None), "glidemq", None)
        if not isinstance(found, GlideMQ):
            raise GlideMQError("no GlideMQ lifespan ran for this app (pass lifespan=...)")
        return found

    def queue(self, name: str) -> Queue[Any, Any]:
        """The open Queue `name`; only between startup and shutdown."""
        try:
            return self._queues[name]
        except KeyError:
            if name not in self.names:
                raise ValidationError("queue", f"{name!r} is not one of {self.names}") from None
            raise GlideMQError("queues are open only while the app runs (lifespan)") from None

    def dependency(self, name: str) -> Callable[[Request], Queue[Any, Any]]:
        """A FastAPI dependency giving the open Queue `name`: `Depends(dependency(name))`."""
        if name not in self.names:
            raise ValidationError("queue", f"{name!r} is not one of {self.names}")

        def get_queue(request: Request) -> Queue[Any, Any]:
            return GlideMQ.of(request.app).queue(name)

        return get_queue

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[Any]:
        """The ASGI lifespan: open the queues, run the app (and its own lifespan), close."""
        async with contextlib.AsyncExitStack() as stack:
            for name in self.names:
                queue: Queue[Any, Any] = Queue(
                    name,
                    connection=self.connection,
                    prefix=self.prefix,
                    compression=self.compression,
                    result_ttl=self.result_ttl,
                )
                stack.push_async_callback(queue.close)
                await queue.__aenter__()
                self._queues[name] = queue
            stack.callback(self._queues.clear)
            state = getattr(app, "state", None)
            if state is not None:
                state.glidemq = self
            if self._inner is None:
                yield None
            else:
                async with self._inner(app) as inner_state:
                    yield inner_state
