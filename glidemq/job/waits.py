"""Why a wait for a job ran out: what a JobTimeoutError tells the caller besides the time.

A job that still waits after the caller's timeout usually waits for a worker that is not
there; the worker registry (glidemq.wire.workers) says whether any worker served the queue
lately, and the queue's meta hash whether it is paused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from ..client import outage
from ..client.context import QueueContext
from ..errors import ConnectionError, GlideMQError
from ..wire.workers import get_workers

__all__ = ["bounded", "unfinished_reason"]

T = TypeVar("T")

_WAITING = ("waiting", "prioritized", "group-waiting", "rate-limited")
_GRACE = 1.0  # seconds a call may run past the wait's deadline: its reply may be on its way


async def bounded(
    ctx: QueueContext, call: Awaitable[T], deadline: float | None, timeout: float | None
) -> T:
    """`call` (a read of the waited job), cut off shortly after the wait's `deadline`
    (monotonic; None: not cut off) with a ConnectionError naming the server and its
    outage: a server that does not answer must not stretch a wait of `timeout` s to the
    client's own time-out."""
    if deadline is None:
        return await call
    try:
        return await asyncio.wait_for(call, max(deadline - time.monotonic(), 0.0) + _GRACE)
    except TimeoutError:
        where = f" at {ctx.where}" if ctx.where else ""
        lost = outage.describe(ctx.where)
        raise ConnectionError(
            f"no answer from the server{where} within the {timeout} s wait for a job of "
            f"queue {ctx.name!r}" + (f" ({lost})" if lost else "")
        ) from None


async def unfinished_reason(ctx: QueueContext, state: str) -> str:
    """A short text on why a job of this queue is still `state` ('' when nothing is
    known): no live worker, or the queue paused."""
    if state not in _WAITING and state != "delayed":
        return ""
    try:
        meta = ctx.keys.meta
        if await ctx.command(lambda c: c.hget(meta, "paused")) == b"1":
            return f"queue {ctx.name!r} is paused (resume it to run its jobs)"
        if not await get_workers(ctx, ctx.now_ms()):
            return (
                f"no worker is running for queue {ctx.name!r} (start one: "
                "glidemq-run MODULE, or a Worker on that queue)"
            )
    except GlideMQError:
        return ""  # the timeout is what the caller asked about; no more is known
    return ""
