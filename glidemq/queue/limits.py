"""Queue-wide limits, stored in the queue's meta hash and shared by every worker and producer.

- Rate limit and concurrency (`QueueLimits`, part of `Queue`): the server enforces them inside
  every fetch, from the workers' next fetch on; see docs/ADVANCED.md.
- Backpressure: a limit on jobs not started yet (`maxWaiting`). The server's add functions
  read it once per call and refuse jobs past it with `ERR:QUEUE_FULL`, so the check and the
  add are one atomic step. Jobs not started yet are waiting + prioritized + delayed
  (`Queue.count()`), LIFO, group-waiting and rate-limited jobs included; flow jobs waiting
  for their children are not. Without a limit the check costs one HGET per add call.
  The per-key limit (`maxWaitingPerKey`) bounds the jobs not started yet of each ordering or
  group key, counted by the server in the group's hash (`waiting`); an add past it is
  refused with `ERR:KEY_FULL` while other keys go on.

What a Worker does for limits at run time is in glidemq.worker.limits; the limit options
themselves (RateLimit, TokenBucket, group limits) in glidemq.options.limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..client.context import QueueContext
from ..errors import ValidationError
from ..options.limits import RateLimit
from ..wire.codes import KEY_FULL, QUEUE_FULL, is_full, is_queue_full

if TYPE_CHECKING:
    from ..keys import QueueKeys

__all__ = [
    "KEY_FULL",
    "QUEUE_FULL",
    "RATE_FIELDS",
    "QueueLimits",
    "get_max_waiting",
    "get_max_waiting_per_key",
    "is_full",
    "is_queue_full",
    "optional_int",
    "refused_items",
    "set_max_waiting",
    "set_max_waiting_per_key",
]

_FIELD = "maxWaiting"
_PER_KEY_FIELD = "maxWaitingPerKey"
RATE_FIELDS = ["rateLimitMax", "rateLimitDuration"]
"""The meta hash fields of the queue's global rate limit."""


def optional_int(value: Any) -> int | None:
    """A meta hash value as an int (None stays None)."""
    return None if value is None else int(value)


class QueueLimits:
    """Queue-wide rate limit and concurrency, shared by every worker of the queue; part of
    `Queue`. They are stored in the queue's meta hash and apply from the workers' next fetch."""

    keys: QueueKeys

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    async def set_global_rate_limit(self, max: int, duration: int) -> None:
        """At most `max` jobs start in any window of `duration` ms, over all workers (sliding
        up to `SLIDING_MAX`, fixed windows above; see RateLimit)."""
        limit = RateLimit(max, duration)
        ctx = await self._context()
        meta = self.keys.meta
        await ctx.command(
            lambda c: c.hset(
                meta, {"rateLimitMax": str(limit.max), "rateLimitDuration": str(limit.duration)}
            )
        )
        await ctx.confirm_writes("set_global_rate_limit")

    async def get_global_rate_limit(self) -> RateLimit | None:
        """The limit set by `set_global_rate_limit`, or None."""
        ctx = await self._context()
        meta = self.keys.meta
        got = await ctx.command(lambda c: c.hmget(meta, list(RATE_FIELDS)))
        max_, duration = (optional_int(v) for v in got)
        if not max_ or not duration:
            return None
        return RateLimit(max_, duration)

    async def remove_global_rate_limit(self) -> None:
        """Lift the queue's rate limit (worker limiters still apply)."""
        ctx = await self._context()
        meta, rate = self.keys.meta, self.keys.base + "rate"
        await ctx.command(lambda c: c.hdel(meta, list(RATE_FIELDS)))
        await ctx.command(lambda c: c.hdel(rate, ["start", "count"]))
        await ctx.command(lambda c: c.delete([self.keys.base + "ratelog"]))
        await ctx.confirm_writes("remove_global_rate_limit")

    async def set_global_concurrency(self, n: int) -> None:
        """Run at most `n` jobs of the queue at once over all workers; 0 removes the limit."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValidationError("concurrency", f"must be an integer >= 0, got {n!r}")
        ctx = await self._context()
        meta = self.keys.meta
        if n == 0:
            await ctx.command(lambda c: c.hdel(meta, ["concurrency"]))
        else:
            await ctx.command(lambda c: c.hset(meta, {"concurrency": str(n)}))
        await ctx.confirm_writes("set_global_concurrency")

    async def get_global_concurrency(self) -> int:
        """The limit set by `set_global_concurrency` (0: none)."""
        ctx = await self._context()
        meta = self.keys.meta
        return optional_int(await ctx.command(lambda c: c.hget(meta, "concurrency"))) or 0


async def set_max_waiting(ctx: QueueContext, limit: int | None) -> None:
    """Store the limit (None removes it)."""
    if limit is None:
        await ctx.command(lambda c: c.hdel(ctx.keys.meta, [_FIELD]))
    else:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValidationError("max_waiting", f"must be an integer >= 0 or None, got {limit!r}")
        await ctx.command(lambda c: c.hset(ctx.keys.meta, {_FIELD: str(limit)}))
    await ctx.confirm_writes("set_max_waiting")


async def get_max_waiting(ctx: QueueContext) -> int | None:
    """The stored limit, or None."""
    raw = await ctx.command(lambda c: c.hget(ctx.keys.meta, _FIELD))
    return None if raw is None else int(raw)


async def set_max_waiting_per_key(ctx: QueueContext, limit: int | None) -> None:
    """Store the per-key limit (None removes it)."""
    if limit is None:
        await ctx.command(lambda c: c.hdel(ctx.keys.meta, [_PER_KEY_FIELD]))
    else:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValidationError(
                "max_waiting_per_key", f"must be an integer >= 0 or None, got {limit!r}"
            )
        await ctx.command(lambda c: c.hset(ctx.keys.meta, {_PER_KEY_FIELD: str(limit)}))
    await ctx.confirm_writes("set_max_waiting_per_key")


async def get_max_waiting_per_key(ctx: QueueContext) -> int | None:
    """The stored per-key limit, or None."""
    raw = await ctx.command(lambda c: c.hget(ctx.keys.meta, _PER_KEY_FIELD))
    return None if raw is None else int(raw)


def refused_items(replies: Sequence[Any]) -> list[int]:
    """Indexes of add_bulk items refused by the limit or never sent after a refusal."""
    return [i for i, r in enumerate(replies) if r is None or is_full(r)]
