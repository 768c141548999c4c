"""The lifecycle a worker of either engine has: `async with`, `run`, pause and resume, and
a close that lets running jobs finish for a while, then stops them."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from ..emitter import Emitter
    from ..types import WorkerOptions

__all__ = ["WorkerLifecycle"]


class WorkerLifecycle:
    """Base of Worker and TestWorker. Each engine says how to `start`, how to wake its
    fetching (`_wake_up`) and what closing stops and hands back (`_shutdown`, which calls
    `_finish_running` for the jobs in progress)."""

    events: Emitter
    opts: WorkerOptions
    completed_count: int
    """Jobs this worker completed since it was made."""
    failed_count: int
    """Tries of this worker that failed since it was made."""

    def __init__(self) -> None:
        self.completed_count = self.failed_count = 0
        self._started = False
        self._closing = False
        self._closed = asyncio.Event()
        self._force_close = asyncio.Event()
        self._paused = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start taking jobs."""
        raise NotImplementedError

    async def run(self) -> None:
        """Start (if needed) and wait until the worker is closed."""
        await self.start()
        await self._closed.wait()

    async def wait_until_ready(self) -> None:
        """Same as `start()`: returns once the worker is taking jobs."""
        await self.start()

    def is_running(self) -> bool:
        """Whether the worker was started and is not closing."""
        return self._started and not self._closing

    def is_paused(self) -> bool:
        """Whether `pause()` was called and not yet `resume()`."""
        return self._paused

    def is_closing(self) -> bool:
        """Whether `close()` has begun."""
        return self._closing

    @property
    def active_count(self) -> int:
        """Jobs this worker holds right now (running or being completed)."""
        raise NotImplementedError

    def _held_tasks(self) -> list[asyncio.Task[Any]]:
        """The tasks running the jobs this worker holds, not done yet (a batch's once)."""
        raise NotImplementedError

    def pause(self) -> None:
        """Stop taking new jobs; running jobs go on."""
        self._paused = True
        self.events.emit("paused")

    def resume(self) -> None:
        """Take jobs again after `pause()`."""
        self._paused = False
        self._wake_up()
        self.events.emit("resumed")

    def _wake_up(self) -> None:
        """Let the fetching look for jobs now."""
        raise NotImplementedError

    async def close(self, force: bool = False, timeout: float | None = None) -> None:
        """Stop taking jobs, let running jobs finish for up to `timeout` seconds (default
        `close_timeout`; none with `force`), then hand unfinished jobs straight back to the
        queue. Idempotent."""
        if self._closing:
            if force:
                self._force_close.set()  # a close in progress stops waiting for jobs
            await self._closed.wait()
            return
        self._closing = True
        self.events.emit("closing")
        try:
            await self._shutdown(force, self.opts.close_timeout if timeout is None else timeout)
        finally:
            self._closed.set()
            self.events.emit("closed")

    async def _shutdown(self, force: bool, timeout: float) -> None:
        raise NotImplementedError

    async def _finish_running(self, force: bool, timeout: float) -> None:
        """Let the running jobs finish for up to `timeout` seconds (not at all with `force`,
        and no longer once a forced close comes), then cancel the rest and wait for them."""
        running: list[asyncio.Task[Any]] = self._held_tasks()
        if running and not force and timeout > 0:
            finished = asyncio.ensure_future(asyncio.wait(running))
            forced = asyncio.ensure_future(self._force_close.wait())
            await asyncio.wait(
                {finished, forced}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            finished.cancel()
            forced.cancel()
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
