"""The sync API's event loop: one per process, in a daemon thread of its own.

Every sync call runs its coroutine there and blocks the calling thread until it is done, so
each connection is opened once and shared by every thread of the process, and a caller that
has an event loop of its own running (Jupyter, an async framework calling sync code) does not
deadlock: it waits on a different loop. After `os.fork` the child forgets the parent's loop
and connections (their threads did not survive the fork) and opens its own on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from ..errors import ConnectionError, GlideMQError, OperationTimeoutError
from .pipe import keep_replies_flowing

__all__ = ["DEFAULT_TIMEOUT", "aio", "call", "close_at_exit", "owns_thread"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Seconds a sync call waits by default before OperationTimeoutError."""

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_closers: dict[int, Callable[[], Awaitable[None]]] = {}  # run on the loop at interpreter exit


def _forget_after_fork() -> None:
    global _loop, _thread, _lock
    _loop, _thread = None, None
    _closers.clear()
    _lock = threading.Lock()  # the parent may have held it while forking


os.register_at_fork(after_in_child=_forget_after_fork)


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    loop = _loop
    if loop is not None:
        return loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="glidemq-sync", daemon=True)
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def owns_thread() -> bool:
    """Whether the calling thread is the sync API's loop thread (where blocking would hang)."""
    return _thread is not None and threading.current_thread() is _thread


def call(
    make: Callable[[], Coroutine[Any, Any, T]],
    timeout: float | None,
    meanwhile: Callable[[], None] | None = None,
) -> T:
    """Run the coroutine `make()` on the sync loop; block until its result (or error).

    `meanwhile()`, if given, runs on the calling thread while the coroutine runs. After
    `timeout` seconds (None: no limit) the coroutine is cancelled and OperationTimeoutError
    raised."""
    if owns_thread():
        raise GlideMQError(
            "a glidemq.sync call was made from inside a coroutine running on the sync API's "
            "own loop: await the async API there"
        )
    loop = _running_loop()
    keep_replies_flowing(loop)
    future = asyncio.run_coroutine_threadsafe(make(), loop)
    if meanwhile is not None:
        started = time.monotonic()
        meanwhile()
        if timeout is not None:
            timeout = max(0.0, timeout - (time.monotonic() - started))
    try:
        return future.result(timeout)
    except ConnectionError as exc:
        # The frames of the loop thread say nothing about an unreachable server.
        raise exc.with_traceback(None) from None
    except FutureTimeout:
        if future.done():
            raise  # the call's own TimeoutError (JobTimeoutError), not the wait's
        future.cancel()
        raise OperationTimeoutError(
            f"the call did not finish within {timeout:g} s (it may still take effect)"
        ) from None


async def aio(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine `make()` on the sync loop from any other event loop, and await it
    there: what async code uses to share the sync API's connections."""
    if owns_thread():
        return await make()
    future = asyncio.run_coroutine_threadsafe(make(), _running_loop())
    return await asyncio.wrap_future(future)


def close_at_exit(key: int, close: Callable[[], Awaitable[None]] | None) -> None:
    """Run `close()` on the sync loop when the interpreter exits (closing a connection);
    `close=None` forgets what was registered under `key`."""
    if close is None:
        _closers.pop(key, None)
    else:
        _closers[key] = close


def _close_all() -> None:
    loop = _loop
    if loop is None or not _closers or not loop.is_running():
        return
    closers = list(_closers.values())
    _closers.clear()

    async def close() -> None:
        await asyncio.gather(*(c() for c in closers), return_exceptions=True)

    future = asyncio.run_coroutine_threadsafe(close(), loop)
    try:
        future.result(5.0)
    except Exception:  # exiting anyway: a server gone away must not hang the exit
        future.cancel()


atexit.register(_close_all)
