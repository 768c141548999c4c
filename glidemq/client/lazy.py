"""LazyClient: one client, connected (with the library loaded) on first use by one caller at
a time, and closed once; what Broadcast, FlowProducer and Admin hold instead of a connect
block of their own."""

from __future__ import annotations

import asyncio

from ..errors import GlideMQError
from .connection import Client, ConnectionOptions, close_client
from .functions import connect_with_library

__all__ = ["LazyClient"]


class LazyClient:
    """The client of `connection` named `name` (CLIENT SETNAME), made on the first `get()`;
    after `close()`, `get()` raises GlideMQError("<what> is closed")."""

    __slots__ = ("_client", "_closed", "_lock", "connection", "name", "what")

    def __init__(self, connection: ConnectionOptions, name: str, what: str) -> None:
        self.connection = connection
        self.name = name
        self.what = what
        self._client: Client | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def client(self) -> Client | None:
        """The client if it was made and is not closed, else None."""
        return self._client

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    async def get(self) -> Client:
        """The client, connected now if it is not yet (concurrent callers share one)."""
        if self._client is not None:
            return self._client
        if self._closed:
            raise GlideMQError(f"{self.what} is closed")
        async with self._lock:
            if self._client is None:
                if self._closed:
                    raise GlideMQError(f"{self.what} is closed")
                self._client = await connect_with_library(self.connection, name=self.name)
        return self._client

    async def close(self) -> None:
        """Close the client (if one was made). Idempotent."""
        self._closed = True
        client, self._client = self._client, None
        await close_client(client)
