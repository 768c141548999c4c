"""A small event emitter: `on(event, handler)` with sync or async handlers."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Emitter"]

log = logging.getLogger("glidemq")

Handler = Callable[..., Any]


class Emitter:
    """Handlers run in registration order; an async handler is scheduled as a task.

    A handler that raises is logged, never allowed to break the emitter's owner.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def on(self, event: str, handler: Handler) -> Handler:
        """Call `handler(*args)` on every `event`; returns the handler (usable as decorator)."""
        self._handlers.setdefault(event, []).append(handler)
        return handler

    def off(self, event: str, handler: Handler) -> None:
        """Stop calling `handler` for `event`."""
        handlers = self._handlers.get(event, [])
        if handler in handlers:
            handlers.remove(handler)

    def listens(self, event: str) -> bool:
        """Whether anything listens to `event` (lets hot paths skip building arguments)."""
        return bool(self._handlers.get(event))

    def emit(self, event: str, *args: Any) -> None:
        """Call the handlers of `event` with `args`."""
        for handler in self._handlers.get(event, ()):
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(self._done)
            except Exception:
                log.exception("glidemq: %r handler failed", event)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("glidemq: async event handler failed", exc_info=task.exception())
