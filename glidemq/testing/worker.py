"""TestWorker: the real Worker on an in-memory server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..job.job import Job
from ..keys import DEFAULT_PREFIX
from ..options.durability import DurabilityLike
from ..types import WorkerOptions
from ..worker.worker import Processor, Worker
from .server import MemoryConnection, MemoryServer, resolve_server
from .support import UNSUPPORTED_WORKER_OPTIONS, unsupported

__all__ = ["TestWorker"]

D = TypeVar("D")
R = TypeVar("R")


class TestWorker(Worker[D, R]):
    """A `glidemq.Worker` on a MemoryServer: the same options, events and counters. Its
    timers follow the server's clock, so `ManualClock.advance()` wakes it at once."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        name: str,
        processor: Processor[D, R] | Callable[[Job[D, R]], R] | str,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        options: WorkerOptions | None = None,
        durability: DurabilityLike = None,
        **settings: Any,
    ) -> None:
        for option in UNSUPPORTED_WORKER_OPTIONS:
            if settings.get(option) is not None or getattr(options, option, None) is not None:
                raise unsupported(option)
        self.server: MemoryServer = resolve_server(connection)
        super().__init__(
            name,
            processor,
            connection=self.server.options,
            prefix=prefix,
            options=options,
            durability=durability,  # refused: an in-process server has no replicas
            **settings,
        )
        self.server.workers.add(self)

    def holds_jobs(self) -> bool:
        """Whether this worker, running, holds a job (running, held or being completed)."""
        return self.is_running() and (self.active_count > 0 or self._intake.completing())
