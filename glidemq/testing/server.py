"""Which in-memory server a `connection=` value of the test classes names."""

from __future__ import annotations

from typing import Any, TypeAlias

from ..client.connection import ConnectionOptions
from ..errors import ValidationError
from ..memory import MemoryServer

__all__ = ["MemoryConnection", "MemoryServer", "default_server", "resolve_server", "to_options"]

MemoryConnection: TypeAlias = MemoryServer | ConnectionOptions | str | None
"""What TestQueue, TestWorker and the other test classes take as `connection=`."""

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
    if isinstance(connection, ConnectionOptions) and isinstance(connection.backend, MemoryServer):
        return connection.backend
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


def to_options(connection: MemoryConnection) -> ConnectionOptions:
    """The connection options that reach the server `connection` names."""
    return resolve_server(connection).options
