"""A worker's background duties: promote due jobs and fire due job schedulers, recover
stalled jobs, and heartbeat (registering the worker, and keeping the jobs it runs alive,
which also tells it about revoked and lost jobs)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..job import signals
from ..queue.queries import WorkerRegistration
from ..queue.schedulers import SchedulerRunner
from ..timing.clock import monotonic
from ..wire import fetch
from . import limits as worker_limits

if TYPE_CHECKING:
    from .link import WorkerLink

__all__ = ["Maintenance"]

_PROMOTE_BATCH = 1000
_RECLAIM_BATCH = 100
# A stall scan that finds idle entries looks again this much later (a share of the lock, at
# most a second) before it reclaims: long enough for the server to work off what queued up
# while it was stalled, short beside the lock itself.
_CONFIRM_SHARE = 0.1
_CONFIRM_MAX_S = 1.0


class Maintenance:
    """The three periodic loops of one started Worker, on its command client."""

    def __init__(self, link: WorkerLink) -> None:
        self.link = link
        self.stall_cursor = "0-0"
        self.job_schedulers = SchedulerRunner(lambda exc: link.events.emit("error", exc))
        self.heartbeat_interval = min(link.opts.lock_duration / 3000, 5.0)
        self.registration = WorkerRegistration(
            link.consumer, link.opts.concurrency, int(self.heartbeat_interval * 1000)
        )

    def start(self) -> list[asyncio.Task[None]]:
        """Start the loops; the worker cancels them when it closes."""
        loop = asyncio.get_running_loop()
        name = self.link.name
        return [
            loop.create_task(self.promote_loop(), name=f"glidemq-promote-{name}"),
            loop.create_task(self.stall_loop(), name=f"glidemq-stall-{name}"),
            loop.create_task(self.heartbeat_loop(), name=f"glidemq-heartbeat-{name}"),
        ]

    async def promote_loop(self) -> None:
        """Move due delayed jobs to the stream; sleep until the next is due (at most the
        promotion interval, which also bounds how long prioritized jobs wait when idle)."""
        w = self.link
        interval = w.opts.promotion_interval / 1000
        while True:
            delay = interval
            try:
                assert w.ctx is not None
                now = w.ctx.now_ms()
                # Prioritized jobs enter the stream only for slots not running a job: a busy
                # worker's next fetch takes them from the bands in priority order, so one
                # moved early would let a later, more urgent job wait behind it.
                room = max(0, w.slots.capacity - w.slots.running)
                promoted, next_due = await fetch.promote(w.ctx, now, _PROMOTE_BATCH, room)
                if promoted >= _PROMOTE_BATCH:
                    delay = 0
                elif next_due >= 0:
                    delay = max(0.0, min(interval, (next_due - w.ctx.now_ms()) / 1000))
                await signals.sweep(w.ctx, now)  # expired suspensions fail
                next_run = await self.job_schedulers.fire_due(w.ctx, w.ctx.now_ms())
                if next_run is not None:
                    delay = max(0.0, min(delay, (next_run - w.ctx.now_ms()) / 1000))
            except Exception as exc:  # the loop must outlive any one failed step
                w.fault(exc, "promotion")
            await w.connection.clock.sleep(delay)  # a clock that jumps ends it early

    async def stall_loop(self) -> None:
        """Every stalled_interval, reclaim jobs idle longer than lock_duration (their worker
        died or hung), walking the whole pending list with XAUTOCLAIM's cursor.

        An entry found idle is reclaimed only if it is still idle a moment later (the
        confirmation): after the server itself was stopped or stalled, every entry looks
        idle, and the completions and heartbeats the other workers sent meanwhile are still
        queued behind this scan; the pause lets the server apply them first."""
        w = self.link
        interval = w.opts.stalled_interval / 1000
        confirm = min(_CONFIRM_MAX_S, w.opts.lock_duration / 1000 * _CONFIRM_SHARE)
        while True:
            await asyncio.sleep(interval)
            try:
                assert w.ctx is not None
                owners = await fetch.stalled_owners(w.ctx, w.opts.lock_duration)
                if not owners:
                    continue
                await asyncio.sleep(confirm)
                while True:
                    reply = await fetch.reclaim_stalled(
                        w.ctx,
                        w.ctx.now_ms(),
                        w.consumer,
                        w.opts.lock_duration,
                        self.stall_cursor,
                        _RECLAIM_BATCH,
                        w.opts.max_stalled_count,
                        w.emit_flag,
                        w.keep_fail,
                        w.opts.dead_letter,
                    )
                    cursor = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
                    requeued, failed = int(reply[1]), int(reply[2])
                    if requeued or failed:
                        w.report.stalled(requeued, failed, owners)
                        w.events.emit("stalled", requeued, failed)
                    self.stall_cursor = cursor
                    if cursor == "0-0":
                        break
            except Exception as exc:
                w.fault(exc, "stall recovery")

    async def register(self) -> None:
        """Write this worker's entry in the queue's worker registry (Queue.get_workers), and
        read the queue's global rate limit for the worker's pacer."""
        w = self.link
        try:
            assert w.ctx is not None
            completed, failed = w.finished_counts
            stats = {"running": w.running_now(), "completed": completed, "failed": failed}
            await self.registration.beat(w.ctx, stats)
            await worker_limits.refresh_global_pacer(w)
        except Exception as exc:  # the heartbeat loop calls it: it must not end that loop
            w.fault(exc, "registration")

    async def heartbeat_loop(self) -> None:
        """Refresh the registry entry; keep running jobs from looking stalled; abort those
        revoked or taken over."""
        w = self.link
        interval = self.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            await self.register()
            w.report.flush()
            if not w.slots:
                continue
            try:
                assert w.ctx is not None
                held = w.slots.renewable()
                if not held:
                    continue
                args = [p for entry_id, job in held for p in (entry_id, job.id)]
                sent = monotonic()
                lost, revoked = await fetch.heartbeat(w.ctx, w.consumer, args)
                # Lost: another worker owns the job now; it stops here and reports nothing.
                for raw in revoked:
                    w.slots.abort(raw.decode(), revoked=True)
                asked = {entry_id for entry_id, _ in held}
                for raw in lost:
                    w.slots.abort(raw.decode(), revoked=False, entries=asked)
                w.slots.renew([entry_id for entry_id, _ in held], sent)  # held jobs' leases
            except Exception as exc:
                w.fault(exc, "heartbeat")
