"""Graceful shutdown for plain programs: close workers and queues on SIGTERM / SIGINT.

async with Worker("emails", send) as worker:
    await GracefulShutdown(worker, timeout=30).wait()
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Sequence
from typing import Protocol, Self

from .worker import Worker

__all__ = ["GracefulShutdown"]


class _Closeable(Protocol):
    def close(self) -> Awaitable[None]: ...


class GracefulShutdown:
    """On the first SIGTERM or SIGINT, close every given object (workers first, with
    `timeout` seconds for their running jobs); a second signal forces worker closes.

    `install()` is idempotent; `wait()` installs, then returns once everything is closed.
    """

    def __init__(
        self,
        *closeables: _Closeable,
        timeout: float = 30.0,
        signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
    ) -> None:
        self.closeables = list(closeables)
        self.timeout = timeout
        self.signals = tuple(signals)
        self.received: signal.Signals | None = None
        self._installed = False
        self._started = False
        self._force = False
        self._done: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._force_tasks: set[asyncio.Task[None]] = set()

    def install(self) -> Self:
        """Register the signal handlers on the running event loop (once)."""
        if self._installed:
            return self
        loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        for sig in self.signals:
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._installed = True
        return self

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._started:
            # Second signal: workers stop waiting for their running jobs.
            self._force = True
            loop = asyncio.get_running_loop()
            for obj in self.closeables:
                if isinstance(obj, Worker):
                    task = loop.create_task(obj.close(force=True))
                    self._force_tasks.add(task)
                    task.add_done_callback(self._force_tasks.discard)
            return
        self.received = sig
        self._task = asyncio.get_running_loop().create_task(self.shutdown())

    async def shutdown(self) -> None:
        """Close everything now, workers with the timeout. Safe to call more than once."""
        if self._started:
            if self._done is not None:
                await self._done.wait()
            return
        self._started = True
        try:
            await asyncio.gather(
                *(self._close_one(c) for c in self.closeables), return_exceptions=True
            )
        finally:
            if self._done is None:
                self._done = asyncio.Event()
            self._done.set()
            self._restore()

    async def _close_one(self, obj: _Closeable) -> None:
        if isinstance(obj, Worker):
            await obj.close(force=self._force, timeout=self.timeout)
        else:
            await obj.close()  # a Queue, QueueEvents or anything with close()

    def _restore(self) -> None:
        if not self._installed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - no loop left
            return
        for sig in self.signals:
            loop.remove_signal_handler(sig)
        self._installed = False

    async def wait(self) -> signal.Signals | None:
        """Install the handlers and wait until a signal closed everything; returns it."""
        self.install()
        assert self._done is not None
        await self._done.wait()
        return self.received

    def __repr__(self) -> str:
        state = "closed" if self._done and self._done.is_set() else "armed"
        return f"<GracefulShutdown {state} {len(self.closeables)} objects>"
