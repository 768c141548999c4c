"""A Worker for sync code: the async Worker, run on the sync API's loop thread.

For scripts, notebooks and tests of sync code that want jobs processed in this process
without writing any asyncio; production workers are `glidemq-run`. Sync processors run on
threads, async ones on that loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from ..client.connection import ConnectionLike
from ..errors import GlideMQError
from ..job.job import Job as AsyncJob
from ..keys import DEFAULT_PREFIX
from ..types import WorkerOptions
from ..worker.worker import Worker as AsyncWorker
from . import runner

__all__ = ["Worker"]

D = TypeVar("D")
R = TypeVar("R")


class Worker(Generic[D, R]):
    """Process jobs of queue `name` in the background of this process; `start()` returns
    once it takes jobs, `close()` waits for the running ones.

        with glidemq.sync.Worker("emails", send) as worker:
            ...                                     # jobs run while in the block

    Options are the async Worker's (`concurrency=`, `lock_duration=`, ...). A forked child
    does not inherit the worker: start one there."""

    def __init__(
        self,
        name: str,
        processor: Callable[[AsyncJob[D, R]], Any] | str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        options: WorkerOptions | None = None,
        timeout: float | None = runner.DEFAULT_TIMEOUT,
        **settings: Any,
    ) -> None:
        self.timeout = timeout
        self._pid = os.getpid()
        self._worker: AsyncWorker[D, R] = AsyncWorker(
            name, processor, connection=connection, prefix=prefix, options=options, **settings
        )

    def __repr__(self) -> str:
        return f"glidemq.sync.Worker({self._worker.name!r})"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def aio(self) -> AsyncWorker[D, R]:
        """The async Worker behind this one (its `events`, `on(...)`), on the sync loop."""
        return self._worker

    @property
    def name(self) -> str:
        """The queue this worker takes jobs from."""
        return self._worker.name

    def start(self) -> None:
        """Connect and start taking jobs. Idempotent."""
        if self._pid != os.getpid():
            raise GlideMQError("this Worker was started in the parent process: make a new one")
        runner.call(self._worker.start, self.timeout)
        runner.close_at_exit(id(self), self._worker.close)

    def close(self, force: bool = False) -> None:
        """Stop taking jobs and wait for the running ones (`force`: do not wait; they are
        recovered as stalled). Idempotent."""
        if self._pid != os.getpid():
            return  # the parent's worker did not survive the fork
        runner.close_at_exit(id(self), None)
        runner.call(lambda: self._worker.close(force=force), None)
