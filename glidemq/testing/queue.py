"""TestQueue: the real Queue on an in-memory server, plus `settle()`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from ..encoding.serializers import DEFAULT_SERIALIZER
from ..errors import JobTimeoutError
from ..keys import DEFAULT_PREFIX
from ..options.durability import DurabilityLike
from ..queue.queue import Queue
from .server import MemoryConnection, MemoryServer, resolve_server

__all__ = ["TestQueue"]

D = TypeVar("D")
R = TypeVar("R")

_POLL_S = 0.002
_QUIET_POLLS = 5  # polls in a row with no write and no job in a worker: settled
_WAKE_EVERY_S = 0.02  # at most this often: a wake's own reads must not keep it busy


class TestQueue(Queue[D, R]):
    """A `glidemq.Queue` on a MemoryServer (`connection=`: a MemoryServer, None for the
    process's default one, or a URL / ConnectionOptions naming one server per address)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        name: str,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        result_ttl: int | None = None,
        serializer: str = DEFAULT_SERIALIZER,
        durability: DurabilityLike = None,
    ) -> None:
        self.server: MemoryServer = resolve_server(connection)
        super().__init__(
            name,
            connection=self.server.options,
            prefix=prefix,
            compression=compression,
            result_ttl=result_ttl,
            serializer=serializer,
            durability=durability,  # refused: an in-process server has no replicas
        )

    async def settle(self, timeout: float = 10.0) -> None:
        """Return once nothing runs and nothing could start now (testing only): every job is
        finished, delayed into the future, held back by a limit, or no TestWorker runs.

        With a ManualClock: `clock.advance(ms)` then `await queue.settle()` runs everything
        that became due. Raises JobTimeoutError after `timeout` seconds of real time (a
        processor that waits for something that never happens).
        """
        await self._context()
        server = self.server
        deadline = time.monotonic() + timeout
        seen, quiet, woken = -1, 0, 0.0
        while quiet < _QUIET_POLLS:
            busy = any(_busy(w) for w in list(server.workers))
            if busy or server.changes != seen:
                seen, quiet = server.changes, 0
                now = time.monotonic()
                if not busy and now - woken >= _WAKE_EVERY_S:
                    server.wake()  # idle workers look again at once: something changed
                    woken = now
            else:
                quiet += 1
            if time.monotonic() > deadline:
                raise JobTimeoutError(f"queue {self.name!r} still busy after {timeout} s")
            await asyncio.sleep(_POLL_S)


def _busy(worker: Any) -> bool:
    busy: bool = worker.holds_jobs()
    return busy
