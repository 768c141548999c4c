"""What a Worker does for limits at run time: pace its starts on its own clock (`Pacer`,
for its limiter and the queue's global rate limit), pass its limiter to the server with every
fetch (`limiter_args`), pause the queue on `rate_limit`, and hand a job back on
RateLimitError. The server enforces every limit inside the fetch; see docs/ADVANCED.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import GlideMQError, RateLimitError, ValidationError
from ..options.limits import RateLimit, limiter_args
from ..queue.limits import RATE_FIELDS, optional_int
from ..timing.clock import WALL_CLOCK, monotonic
from ..timing.pacer import Pacer
from ..wire import fetch

if TYPE_CHECKING:
    from ..job.job import Job
    from .link import WorkerLink

__all__ = [
    "Pacer",
    "hand_back",
    "limiter_args",
    "pace",
    "rate_limit",
    "refresh_global_pacer",
]


async def pace(link: WorkerLink) -> None:
    """Wait before a processor starts until the worker's limiter and the queue's global
    limit allow it on this process's clock. The start is counted when it happens, after any
    wait (a late wake-up cannot put it closer to the starts before it)."""
    pacers = [p for p in (link.pacer, link.global_pacer) if p is not None]
    clock = link.connection.clock
    # a server's own clock (glidemq.memory) paces by its time, and its jumps wake the sleep
    seconds: Callable[[], float] = (
        monotonic if clock is WALL_CLOCK else (lambda: clock.now_ms() / 1000)
    )
    # time, not an event, frees the next start: sleeping until then is the point
    while (wait := max(p.wait(seconds()) for p in pacers)) > 0:
        await clock.sleep(wait)
    now = seconds()
    for p in pacers:
        p.record(now)  # no await from here to the processor's first line


async def refresh_global_pacer(link: WorkerLink) -> None:
    """Pace this worker's starts by the queue's global rate limit too (read on start and
    every heartbeat); a changed limit starts a new pacer."""
    assert link.ctx is not None
    meta = link.keys.meta
    got = await link.ctx.command(lambda c: c.hmget(meta, list(RATE_FIELDS)))
    max_, duration = (optional_int(v) for v in got)
    limit = RateLimit(max_, duration) if max_ and duration else None
    current = link.global_pacer
    if limit is None or current is None or current.limit != limit:
        link.global_pacer = Pacer.for_limit(limit)


async def rate_limit(link: WorkerLink, ms: int) -> None:
    """Stop every worker of the queue from starting jobs for `ms` milliseconds."""
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValidationError("ms", f"must be an integer >= 0, got {ms!r}")
    if link.ctx is None:
        raise GlideMQError("the worker is not started")
    # safe to run twice: the pause only ever moves later, a job already handed back is 'stale'
    await fetch.rate_limit(link.ctx, link.ctx.now_ms(), ms)


async def hand_back(
    link: WorkerLink, job: Job[Any, Any], error: RateLimitError, counted: bool
) -> None:
    """A processor raised RateLimitError: the job goes back to the queue without counting an
    attempt, and the queue pauses for the error's delay."""
    assert link.ctx is not None
    try:
        reply = await fetch.rate_limit(
            link.ctx, link.ctx.now_ms(), error.delay, job.id, job.entry_id or ""
        )
        if reply == "ok":
            job.state = "waiting"
    except GlideMQError as exc:
        # Left in the pending list: stall recovery hands it back instead.
        link.events.emit("error", exc)
    if counted:
        link.slots.drop(job.entry_id)
    link.slots.wake()
