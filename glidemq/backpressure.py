"""Backpressure: a per-queue limit on jobs not started yet, shared by every producer.

The limit lives in the queue's meta hash (`maxWaiting`); the server's add functions read it
once per call and refuse jobs past it with `ERR:QUEUE_FULL`, so the check and the add are one
atomic step. Jobs not started yet are waiting + prioritized + delayed (`Queue.count()`),
LIFO, group-waiting and rate-limited jobs included; flow jobs waiting for their children are
not. Without a limit the check costs one HGET per add call.

The per-key limit (`maxWaitingPerKey`) bounds the jobs not started yet of each ordering or
group key, counted by the server in the group's hash (`waiting`); an add past it is refused
with `ERR:KEY_FULL` while other keys go on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .context import QueueContext
from .errors import ValidationError

__all__ = [
    "KEY_FULL",
    "QUEUE_FULL",
    "get_max_waiting",
    "get_max_waiting_per_key",
    "is_queue_full",
    "refused_items",
    "set_max_waiting",
    "set_max_waiting_per_key",
]

QUEUE_FULL = "ERR:QUEUE_FULL"
KEY_FULL = "ERR:KEY_FULL"  # one ordering / group key is full; other keys still take jobs
_FIELD = "maxWaiting"
_PER_KEY_FIELD = "maxWaitingPerKey"


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


async def set_max_waiting_per_key(ctx: QueueContext, limit: int | None) -> None:
    """Store the per-key limit (None removes it)."""
    if limit is None:
        await ctx.command(lambda c: c.hdel(ctx.keys.meta, [_PER_KEY_FIELD]))
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError(
            "max_waiting_per_key", f"must be an integer >= 0 or None, got {limit!r}"
        )
    await ctx.command(lambda c: c.hset(ctx.keys.meta, {_PER_KEY_FIELD: str(limit)}))


async def get_max_waiting_per_key(ctx: QueueContext) -> int | None:
    """The stored per-key limit, or None."""
    raw = await ctx.command(lambda c: c.hget(ctx.keys.meta, _PER_KEY_FIELD))
    return None if raw is None else int(raw)


def is_queue_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the queue-wide limit."""
    return bool(reply == b"ERR:QUEUE_FULL" or reply == QUEUE_FULL)


def is_full(reply: Any) -> bool:
    """Whether one add reply is a refusal by the queue-wide or the per-key limit."""
    return is_queue_full(reply) or reply == b"ERR:KEY_FULL" or reply == KEY_FULL


def refused_items(replies: Sequence[Any]) -> list[int]:
    """Indexes of add_bulk items refused by the limit or never sent after a refusal."""
    return [i for i, r in enumerate(replies) if r is None or is_full(r)]
