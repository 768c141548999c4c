"""MemoryServer: what a Valkey server is to Queue and Worker, held in this process."""

from __future__ import annotations

from typing import Any

from ..connection import ConnectionOptions
from ..errors import ValidationError
from ..keys import DEFAULT_PREFIX
from .clock import Clock, SystemClock
from .store import QueueStore

__all__ = ["MemoryConnection", "MemoryServer", "default_server", "resolve_server"]


class MemoryServer:
    """Every in-memory queue of one "server", and the clock they share.

    Pass it as `connection=` to TestQueue and TestWorker so they see the same queues; a
    fresh MemoryServer per test keeps tests apart. `clock=ManualClock()` lets the test
    move time by hand.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._stores: dict[tuple[str, str], QueueStore] = {}
        self.clock.subscribe(self._time_jumped)

    def store(self, name: str, prefix: str = DEFAULT_PREFIX) -> QueueStore:
        """The state of queue `name` (created empty on first use)."""
        key = (prefix, name)
        store = self._stores.get(key)
        if store is None:
            store = self._stores[key] = QueueStore(
                name, self.clock, prefix, lambda other: self.store(other, prefix)
            )
        return store

    def queue_names(self, prefix: str = DEFAULT_PREFIX) -> list[str]:
        """Names of the queues this server holds."""
        return sorted(n for p, n in self._stores if p == prefix)

    def flush(self) -> None:
        """Forget every queue (like FLUSHALL)."""
        for store in self._stores.values():
            store.reset()
            store.notify()

    def _time_jumped(self) -> None:
        for store in self._stores.values():
            store.notify()

    def __repr__(self) -> str:
        return f"<MemoryServer {len(self._stores)} queues, {self.clock!r}>"


MemoryConnection = MemoryServer | ConnectionOptions | str | None
"""What TestQueue and TestWorker take as `connection=`."""

_default = MemoryServer()
_by_address: dict[Any, MemoryServer] = {}


def default_server() -> MemoryServer:
    """The server used when `connection=None` (real time)."""
    return _default


def resolve_server(connection: MemoryConnection) -> MemoryServer:
    """The MemoryServer behind a `connection=` value.

    None is the default server; a URL or ConnectionOptions names a server of its own, so
    code that passes the same URL to its queue and its worker keeps working unchanged.
    """
    if connection is None:
        return _default
    if isinstance(connection, MemoryServer):
        return connection
    if isinstance(connection, str):
        key: Any = ConnectionOptions.from_url(connection)
    elif isinstance(connection, ConnectionOptions):
        key = connection
    else:
        raise ValidationError(
            "connection", f"expected a MemoryServer, a URL or ConnectionOptions, got {connection!r}"
        )
    server = _by_address.get(key)
    if server is None:
        server = _by_address[key] = MemoryServer()
    return server
