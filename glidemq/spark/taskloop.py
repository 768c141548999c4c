"""A private event loop for one Spark task, so synchronous Spark hooks can call glidemq.

Spark calls a data source's `partitions`, `read` and `write` as plain functions, in worker
processes it may reuse for many tasks. Each task gets its own loop and its own connections,
and closes both before it returns: a valkey-glide client must not outlive the loop it was
created on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

__all__ = ["TaskLoop"]

T = TypeVar("T")


class TaskLoop:
    """`with TaskLoop() as loop: loop.run(coro)`; the loop is closed on exit."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine to completion on the task's loop."""
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Cancel what is left and close the loop. Idempotent."""
        if self._loop.is_closed():
            return
        pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
