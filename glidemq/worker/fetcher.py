"""How a Worker takes jobs: a non-blocking fetch through the server library (which also
admits prioritized jobs), and only when that finds nothing, a blocking read on the
worker's dedicated client with the call that activates what it reads queued behind it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glide import GlideError as _GlideError
from glide import StreamGroupOptions

from ..client.retry import to_glidemq_error
from ..errors import ConnectionError, DurabilityError, GlideMQError, ServerError
from ..timing.clock import WALL_CLOCK, monotonic
from ..wire import fetch
from .hold import send_back
from .lease import Lease
from .starts import ALL_RECORDED, Recording

if TYPE_CHECKING:
    from .forget import LostFetches
    from .link import WorkerLink
    from .slots import Slots
    from .starts import StartReports

__all__ = ["Fetcher", "InOrder", "wake_consumer"]

log = logging.getLogger("glidemq.worker")


class InOrder:
    """Hands the jobs of fetch replies on in the order the calls were sent. valkey-glide may
    resolve concurrent calls out of order, and jobs must start (or be held) in queue order.
    Every `ticket` taken must be `deliver`ed once, with an empty list when its call failed;
    the slots its fetch reserved stay reserved until its jobs have started."""

    __slots__ = ("_early", "_next", "_sent", "slots", "start")

    def __init__(
        self, start: Callable[[list[Any], float, Recording], None], slots: Slots[Any]
    ) -> None:
        self.start = start
        self.slots = slots
        self._sent = 0
        self._next = 0
        self._early: dict[int, tuple[list[Any], int, float, Recording]] = {}

    def ticket(self) -> int:
        """The place of a fetch about to be sent."""
        t = self._sent
        self._sent += 1
        return t

    def deliver(
        self,
        ticket: int,
        flat: list[Any],
        reserved: int,
        sent: float,
        rec: Recording = ALL_RECORDED,
    ) -> None:
        """The reply of fetch `ticket`, which reserved `reserved` slots and was sent at `sent`
        (monotonic seconds, where its jobs' lease starts); `rec`: what it asked the server to
        record (how many of its jobs start at once; glidemq/worker/starts.py): start its
        jobs once every earlier fetch's are, then release its slots."""
        if ticket != self._next:
            self._early[ticket] = (flat, reserved, sent, rec)
            return
        while True:
            self._next += 1
            try:
                self.start(flat, sent, rec)
            finally:
                self.slots.release(reserved)
            if self._next not in self._early:
                return
            flat, reserved, sent, rec = self._early.pop(self._next)


class Fetcher:
    """The fetch loop of one Worker; it fills the worker's free slots (`link.slots`).
    `order` starts the jobs of replies in the order the fetches were sent; while
    `completing()` is true, the worker's completions fetch and this loop stands aside."""

    def __init__(
        self,
        link: WorkerLink,
        order: InOrder,
        completing: Callable[[], bool],
        starts: StartReports,
        recorded: Callable[[], None],
        lost: LostFetches,
    ) -> None:
        self.link = link
        self.order = order
        self.completing = completing
        self.starts = starts
        self.lost = lost  # fetches whose answer was lost: their jobs go back
        self.recorded = recorded  # the server recorded a start report: held jobs may start
        self.drained_emitted = False
        # A completion's fetch came back short: the queue had nothing more to take, so the
        # next fetch goes straight to the blocking read (which still returns at once if
        # entries came meanwhile) instead of asking without blocking first.
        self.found_empty = False
        self.limited_ms = 0  # > 0: a queue-wide limit stopped the last fetch for this long
        # For the Watchdog: whether the loop wants jobs, and when a fetch last succeeded.
        self.wants = False
        self.progress_at = monotonic()
        self.error_at = float("-inf")
        # A blocking read's send time starts the lease of what it delivers: block at most
        # half a lease, so that jobs read at the end of a block may still start at once.
        self.block_ms = Lease(link.opts.lock_duration).block_ms(link.opts.block_timeout)

    def quarantined(self, entry_ids: list[Any]) -> None:
        """Stream entries the library moved to the quarantine stream (not written by glidemq:
        no `id` field): log them and emit `quarantined(entry_id, reason)`."""
        w = self.link
        where = w.keys.stream.removesuffix("stream") + "quarantine"
        for raw in entry_ids:
            entry_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            reason = (
                f"stream entry {entry_id} has no 'id' field (written by another producer?); "
                f"moved to {where}"
            )
            log.warning("glidemq: queue %s: %s", w.name, reason)
            w.events.emit("quarantined", entry_id, reason)

    async def ensure_group(self) -> None:
        """Create the `workers` group from id 0, so jobs added before any worker count."""
        w = self.link
        assert w.ctx is not None
        stream, opts = w.keys.stream, StreamGroupOptions(make_stream=True)
        try:
            await w.ctx.command(lambda c: c.xgroup_create(stream, "workers", "0", opts))
        except ServerError as exc:
            if exc.code != "BUSYGROUP":
                raise ServerError(f"cannot create the consumer group: {exc}", exc.code) from exc

    async def loop(self) -> None:
        """Fetch while there are free slots; wait for a slot otherwise. Completions fetch
        too, so this loop stands aside while a completion flush is pending."""
        w, slots = self.link, self.link.slots
        backoff = 0.05
        while not w.closing:
            try:
                if w.paused or slots.free() <= 0 or self.completing():
                    self.wants = False
                    await slots.wait()
                    continue
                if not self.wants:
                    self.wants, self.progress_at = True, monotonic()
                if self.found_empty:
                    self.found_empty = False
                    await self.fetch_blocking()
                    self.progress_at = monotonic()
                    backoff = 0.05
                    continue
                got = await self.fetch_now()
                self.progress_at = monotonic()
                if got is None:  # queue paused on the server
                    await w.connection.clock.sleep(min(0.5, w.opts.block_timeout / 1000))
                elif got == 0 and self.limited_ms:
                    await self.wait_limit()
                elif got == 0:
                    await self.fetch_blocking()
                    self.progress_at = monotonic()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop must outlive any one failed fetch
                self.error_at = monotonic()
                if isinstance(exc, ServerError) and exc.code == "NOGROUP":
                    try:
                        await self.ensure_group()
                        continue
                    except GlideMQError as group_exc:  # server gone again: back off, retry
                        exc = group_exc
                if isinstance(exc, ConnectionError):
                    w.report.connection_lost(str(exc))
                w.fault(exc, "fetching")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def wait_limit(self) -> None:
        """A queue-wide limit stopped the fetch: sleep until it may pass (or this worker
        frees a slot itself), not in a blocking read that would take jobs over the limit."""
        w = self.link
        seconds = min(self.limited_ms, w.opts.block_timeout) / 1000
        clock = w.connection.clock
        if clock is WALL_CLOCK:
            await w.slots.wait(seconds)
            return
        # a clock of its own (glidemq.memory) may jump past the limit: wake for that too
        waits = [
            asyncio.ensure_future(w.slots.wait(seconds)),
            asyncio.ensure_future(clock.sleep(seconds)),
        ]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()

    async def fetch_now(self) -> int | None:
        """Take up to the free slots without blocking; None when the queue is paused."""
        w = self.link
        ctx = w.ctx
        assert ctx is not None
        n = w.slots.reserve()
        ticket, flat = self.order.ticket(), []
        rec = self.starts.for_call(n)
        token = self.lost.token()
        hook, ambiguous = self.lost.watch()
        sent = monotonic()
        ok = False
        try:
            try:
                got = await fetch.complete_and_fetch_next(
                    ctx, ctx.now_ms(), w.consumer, n, w.emit_flag, (), w.limiter,
                    rec.start_now, rec.pairs, rec.confirmed, token, hook,
                )  # fmt: skip
            except DurabilityError as exc:
                # taken on the primary, not confirmed: run them (their completions wait)
                w.events.emit("error", exc)
                got = fetch.fetched_of(exc.reply)
            flat, ok = got.entries, True  # the server ran the call: its starts are recorded
        finally:
            if ambiguous():
                self.lost.lost(token, flat)
            self.starts.answered(rec, ok, sent)
            self.order.deliver(ticket, flat, n, sent, rec)
            if rec.pairs:  # as a flush does: else nothing starts a recorded held job
                self.recorded()
        self.took(got, 0)
        if got.paused:
            return None
        return len(flat) // 3

    def took(self, got: fetch.Fetched, completion_asked: int) -> None:
        """What a fetch reply says about the queue, whichever fetch sent it: entries to
        quarantine, a queue-wide limit; and when a completion asked for
        `completion_asked` jobs and got fewer, that the queue ran empty (the loop goes
        straight to the blocking read next)."""
        if got.quarantined:
            self.quarantined(got.quarantined)
        self.limited_ms = got.limited_ms
        if (
            completion_asked
            and len(got.entries) < 3 * completion_asked
            and not got.paused
            and not got.limited_ms
        ):
            self.found_empty = True

    def delivered(self) -> None:
        """Jobs were started: the next time the queue runs dry is a new `drained`."""
        self.drained_emitted = False

    async def fetch_blocking(self) -> None:
        """Wait on the dedicated client for new entries; the server activates them right
        behind the read (one pipeline), so the first job after idle costs one round trip."""
        w = self.link
        ctx, blocking = w.ctx, w.blocking
        assert blocking is not None and ctx is not None
        if min(w.slots.free(), w.slots.prefetch) <= 0:
            return
        if not self.drained_emitted:
            self.drained_emitted = True
            w.events.emit("drained")
        n = w.slots.reserve()
        held = n  # released here unless the activation's delivery releases them
        wake = wake_consumer(w.consumer)
        rec = self.starts.for_call(n, report=False)
        start_now = rec.start_now
        token = self.lost.token()
        sent = monotonic()
        try:
            try:
                read, woken = await fetch.wait_and_activate(
                    blocking, w.keys, w.consumer, wake, n, self.block_ms,
                    w.emit_flag, w.limiter, start_now, token,
                )  # fmt: skip
            except _GlideError as exc:
                self.lost.lost(token, client=blocking)  # it may have run
                if w.closing:
                    return
                raise to_glidemq_error(exc, "blocking read") from exc
            if isinstance(read, Exception):
                raise to_glidemq_error(read, "blocking read")
            if isinstance(woken, Exception):
                # e.g. the library was lost with a server restart: once more through the
                # context, which loads it again; the entries wait for it under `wake`
                hook, ambiguous = self.lost.watch()
                woken = []
                try:
                    woken = await fetch.activate_woken(
                        ctx, w.consumer, wake, n, w.emit_flag, w.limiter, start_now, token, hook
                    )
                finally:
                    if ambiguous():
                        self.lost.lost(token, woken[0] if woken else ())
            flat, moved = woken[0], woken[1]
            if moved:
                self.quarantined(moved)
            if flat and (w.paused or w.closing):
                # paused or closing while the read was blocked: hand the jobs back unstarted
                pairs = [flat[i + k].decode() for i in range(0, len(flat), 3) for k in (0, 1)]
                await send_back(w, pairs)
                return
            ticket, held = self.order.ticket(), 0
            self.order.deliver(ticket, flat, n, sent, rec)
        finally:
            w.slots.release(held)


def wake_consumer(consumer: str) -> str:
    """The consumer a worker's blocking reads deliver to; glidemq_activateWoken moves what
    they read to `consumer` (stall recovery covers entries it never got to)."""
    return consumer + ":wake"
