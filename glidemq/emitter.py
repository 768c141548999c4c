"""A small event emitter: `on(event, handler)` with sync or async handlers. An `error` that
nobody listens to is logged at WARNING (rate-limited), never dropped in silence."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Emitter"]

log = logging.getLogger("glidemq")

Handler = Callable[..., Any]

UNHEARD_ERROR_EVERY_S = 60.0
"""At most one warning line this often for `error` events nobody listens to (a reconnect
loop emits one per try)."""


class Emitter:
    """Handlers run in registration order; an async handler is scheduled as a task.

    A handler that raises is logged, never allowed to break the emitter's owner. An `error`
    event without a handler is logged at WARNING on the `glidemq` logger, naming `owner`:
    the first at once, then at most one every `UNHEARD_ERROR_EVERY_S` seconds, saying how
    many were not logged in between.
    """

    def __init__(self, owner: str | None = None) -> None:
        self.owner = owner
        self._handlers: dict[str, list[Handler]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unheard_at = float("-inf")
        self._unheard_skipped = 0

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
        handlers = self._handlers.get(event)
        if not handlers:
            if event == "error":
                self._unheard(args)
            return
        for handler in handlers:
            try:
                result = handler(*args)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._tasks.add(task)
                    task.add_done_callback(self._done)
            except Exception:
                log.exception("glidemq: %r handler failed", event)

    def _unheard(self, args: tuple[Any, ...]) -> None:
        now = time.monotonic()
        if now - self._unheard_at < UNHEARD_ERROR_EVERY_S:
            self._unheard_skipped += 1
            return
        self._unheard_at = now
        skipped, self._unheard_skipped = self._unheard_skipped, 0
        error = args[0] if args else None
        what = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
        more = f" ({skipped} more since the last one)" if skipped else ""
        log.warning(
            "glidemq: %s: error with no 'error' listener%s: %s",
            self.owner or "emitter",
            more,
            what,
        )

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("glidemq: async event handler failed", exc_info=task.exception())
