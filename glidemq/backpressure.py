"""Backpressure: a per-queue limit on jobs not started yet, shared by every producer.

The limit lives in the queue's meta hash (`maxWaiting`); the server's add functions read it
once per call and refuse jobs past it with `ERR:QUEUE_FULL`, so the check and the add are one
atomic step. Jobs not started yet are waiting + prioritized + delayed (`Queue.count()`),
LIFO, group-waiting and rate-limited jobs included; flow jobs waiting for their children are
not. Without a limit the check costs one HGET per add call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .context import QueueContext
from .errors import ValidationError

__all__ = ["QUEUE_FULL", "get_max_waiting", "refused_items", "set_max_waiting"]

QUEUE_FULL = "ERR:QUEUE_FULL"
_FIELD = "maxWaiting"


async def set_max_waiting(ctx: QueueContext, limit: int | None) -> None:
    """Store the limit (None removes it)."""
    if limit is None:
        await ctx.command(lambda c: c.hdel(ctx.keys.meta, [_FIELD]))
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError("max_waiting", f"must be an integer >= 0 or None, got {limit!r}")
    await ctx.command(lambda c: c.hset(ctx.keys.meta, {_FIELD: str(limit)}))


async def get_max_waiting(ctx: QueueContext) -> int | None:
    """The stored limit, or None."""
    raw = await ctx.command(lambda c: c.hget(ctx.keys.meta, _FIELD))
    return None if raw is None else int(raw)


def is_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the limit."""
    return bool(reply == b"ERR:QUEUE_FULL" or reply == QUEUE_FULL)


def refused_items(replies: Sequence[Any]) -> list[int]:
    """Indexes of add_bulk items refused by the limit or never sent after a refusal."""
    return [i for i, r in enumerate(replies) if r is None or is_full(r)]
