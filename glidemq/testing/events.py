"""TestQueueEvents: the real QueueEvents on an in-memory server."""

from __future__ import annotations

from ..events import QueueEvents
from ..keys import DEFAULT_PREFIX
from .server import MemoryConnection, MemoryServer, resolve_server

__all__ = ["TestQueueEvents"]


class TestQueueEvents(QueueEvents):
    """Follow an in-memory queue's events: `glidemq.QueueEvents` on a MemoryServer."""

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
        self.server: MemoryServer = resolve_server(connection)
        super().__init__(
            name,
            connection=self.server.options,
            prefix=prefix,
            last_id=last_id,
            block_timeout=block_timeout,
            buffer_size=buffer_size,
        )
