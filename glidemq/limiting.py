"""Queue-wide limits at run time: the Queue methods that set them, and what a Worker does for
them (pass its limiter to the server, pause the queue on `rate_limit`, hand a job back on
RateLimitError). The server enforces every limit inside the fetch; see docs/ADVANCED.md."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from .context import QueueContext, now_ms
from .errors import GlideMQError, RateLimitError, ValidationError
from .limits import SLIDING_MAX, RateLimit
from .wire import fetch

if TYPE_CHECKING:
    from .job import Job
    from .keys import QueueKeys
    from .types import WorkerOptions
    from .worker import Worker

__all__ = [
    "Pacer",
    "QueueLimits",
    "hand_back",
    "limiter_args",
    "pace",
    "rate_limit",
    "refresh_global_pacer",
]

_RATE_FIELDS = ["rateLimitMax", "rateLimitDuration"]


def _int(value: Any) -> int | None:
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

    async def get_global_rate_limit(self) -> RateLimit | None:
        """The limit set by `set_global_rate_limit`, or None."""
        ctx = await self._context()
        meta = self.keys.meta
        got = await ctx.command(lambda c: c.hmget(meta, list(_RATE_FIELDS)))
        max_, duration = (_int(v) for v in got)
        if not max_ or not duration:
            return None
        return RateLimit(max_, duration)

    async def remove_global_rate_limit(self) -> None:
        """Lift the queue's rate limit (worker limiters still apply)."""
        ctx = await self._context()
        meta, rate = self.keys.meta, self.keys.base + "rate"
        await ctx.command(lambda c: c.hdel(meta, list(_RATE_FIELDS)))
        await ctx.command(lambda c: c.hdel(rate, ["start", "count"]))
        await ctx.command(lambda c: c.delete([self.keys.base + "ratelog"]))

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

    async def get_global_concurrency(self) -> int:
        """The limit set by `set_global_concurrency` (0: none)."""
        ctx = await self._context()
        meta = self.keys.meta
        return _int(await ctx.command(lambda c: c.hget(meta, "concurrency"))) or 0


class Pacer:
    """The worker limiter on the worker's own clock. The server admits starts by their stamps
    at the fetch; a job runs a little later, and dispatch times vary. Before a processor
    starts, the pacer waits (a few ms at most) so that no window of `duration` on this
    process's monotonic clock sees more than `max` starts."""

    __slots__ = ("_log", "_max", "_span", "limit")

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._max, self._span = limit.max, limit.duration / 1000
        self._log: deque[float] = deque(maxlen=limit.max)

    @classmethod
    def for_limit(cls, limit: RateLimit | None) -> Pacer | None:
        """A pacer for a sliding limit; None without a limiter or for a fixed-window one."""
        if limit is None or limit.max > SLIDING_MAX:
            return None
        return cls(limit)

    def wait(self) -> float:
        """Seconds until one more start fits in the window (0: now)."""
        if len(self._log) < self._max:
            return 0.0
        return max(0.0, self._log[0] + self._span - time.monotonic())

    def record(self, at: float) -> None:
        """Count a start at monotonic time `at` (the latest so far)."""
        self._log.append(at)


async def pace(worker: Worker[Any, Any]) -> None:
    """Wait before a processor starts until the worker's limiter and the queue's global
    limit allow it on this process's clock. The start is counted when it happens, after any
    wait (a late wake-up cannot put it closer to the starts before it)."""
    pacers = [p for p in (worker._pacer, worker._global_pacer) if p is not None]
    # time, not an event, frees the next start: sleeping until then is the point
    while (wait := max(p.wait() for p in pacers)) > 0:  # noqa: ASYNC110
        await asyncio.sleep(wait)
    now = time.monotonic()
    for p in pacers:
        p.record(now)  # no await from here to the processor's first line


async def refresh_global_pacer(worker: Worker[Any, Any]) -> None:
    """Pace this worker's starts by the queue's global rate limit too (read on start and
    every heartbeat); a changed limit starts a new pacer."""
    assert worker._ctx is not None
    meta = worker.keys.meta
    got = await worker._ctx.command(lambda c: c.hmget(meta, list(_RATE_FIELDS)))
    max_, duration = (_int(v) for v in got)
    limit = RateLimit(max_, duration) if max_ and duration else None
    current = worker._global_pacer
    if limit is None or current is None or current.limit != limit:
        worker._global_pacer = Pacer.for_limit(limit)


def limiter_args(opts: WorkerOptions) -> list[str]:
    """The worker limiter as the fetch functions take it: max, duration ('0' '0': none)."""
    if opts.limiter is None:
        return ["0", "0"]
    return [str(opts.limiter.max), str(opts.limiter.duration)]


async def rate_limit(worker: Worker[Any, Any], ms: int) -> None:
    """Stop every worker of the queue from starting jobs for `ms` milliseconds."""
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValidationError("ms", f"must be an integer >= 0, got {ms!r}")
    if worker._ctx is None:
        raise GlideMQError("the worker is not started")
    # safe to run twice: the pause only ever moves later, a job already handed back is 'stale'
    await fetch.rate_limit(worker._ctx, now_ms(), ms)


async def hand_back(
    worker: Worker[Any, Any], job: Job[Any, Any], error: RateLimitError, counted: bool
) -> None:
    """A processor raised RateLimitError: the job goes back to the queue without counting an
    attempt, and the queue pauses for the error's delay."""
    assert worker._ctx is not None
    try:
        reply = await fetch.rate_limit(
            worker._ctx, now_ms(), error.delay, job.id, job.entry_id or ""
        )
        if reply == "ok":
            job.state = "waiting"
    except GlideMQError as exc:
        # Left in the pending list: stall recovery hands it back instead.
        worker.events.emit("error", exc)
    if counted:
        worker._active.pop(job.entry_id or "", None)
    worker._wake.set()
