"""How a Worker takes jobs: a non-blocking fetch through the server library (which also
admits prioritized jobs), and only when that finds nothing, a blocking read on the
worker's dedicated client, after which the entries are activated in one call."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from glide import GlideError as _GlideError
from glide import StreamGroupOptions, StreamReadGroupOptions

from .context import now_ms
from .errors import GlideMQError, ServerError
from .retry import to_glidemq_error
from .wire import fetch

if TYPE_CHECKING:
    from .link import WorkerLink
    from .slots import Slots

__all__ = ["Fetcher", "InOrder"]

log = logging.getLogger("glidemq.worker")


class InOrder:
    """Hands the jobs of fetch replies on in the order the calls were sent. valkey-glide may
    resolve concurrent calls out of order, and jobs must start (or be held) in queue order.
    Every `ticket` taken must be `deliver`ed once, with an empty list when its call failed;
    the slots its fetch reserved stay reserved until its jobs have started."""

    __slots__ = ("_early", "_next", "_sent", "slots", "start")

    def __init__(self, start: Callable[[list[Any]], None], slots: Slots[Any]) -> None:
        self.start = start
        self.slots = slots
        self._sent = 0
        self._next = 0
        self._early: dict[int, tuple[list[Any], int]] = {}

    def ticket(self) -> int:
        """The place of a fetch about to be sent."""
        t = self._sent
        self._sent += 1
        return t

    def deliver(self, ticket: int, flat: list[Any], reserved: int) -> None:
        """The reply of fetch `ticket`, which reserved `reserved` slots: start its jobs once
        every earlier fetch's are, then release its slots."""
        if ticket != self._next:
            self._early[ticket] = (flat, reserved)
            return
        while True:
            self._next += 1
            try:
                self.start(flat)
            finally:
                self.slots.release(reserved)
            if self._next not in self._early:
                return
            flat, reserved = self._early.pop(self._next)


class Fetcher:
    """The fetch loop of one Worker; it fills the worker's free slots (`link.slots`).
    `order` starts the jobs of replies in the order the fetches were sent; while
    `completing()` is true, the worker's completions fetch and this loop stands aside."""

    def __init__(
        self,
        link: WorkerLink,
        order: InOrder,
        completing: Callable[[], bool],
    ) -> None:
        self.link = link
        self.order = order
        self.completing = completing
        self.drained_emitted = False
        self.limited_ms = 0  # > 0: a queue-wide limit stopped the last fetch for this long
        # For the Watchdog: whether the loop wants jobs, and when a fetch last succeeded.
        self.wants = False
        self.progress_at = time.monotonic()
        self.error_at = float("-inf")

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
            if "BUSYGROUP" not in str(exc):
                raise ServerError(f"cannot create the consumer group: {exc}") from exc

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
                    self.wants, self.progress_at = True, time.monotonic()
                got = await self.fetch_now()
                self.progress_at = time.monotonic()
                if got is None:  # queue paused on the server
                    await asyncio.sleep(min(0.5, w.opts.block_timeout / 1000))
                elif got == 0 and self.limited_ms:
                    await self.wait_limit()
                elif got == 0:
                    await self.fetch_blocking()
                    self.progress_at = time.monotonic()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except GlideMQError as exc:
                self.error_at = time.monotonic()
                if "NOGROUP" in str(exc):
                    try:
                        await self.ensure_group()
                        continue
                    except GlideMQError as group_exc:  # server gone again: back off, retry
                        exc = group_exc
                w.events.emit("error", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def wait_limit(self) -> None:
        """A queue-wide limit stopped the fetch: sleep until it may pass (or this worker
        frees a slot itself), not in a blocking read that would take jobs over the limit."""
        w = self.link
        await w.slots.wait(min(self.limited_ms, w.opts.block_timeout) / 1000)

    async def fetch_now(self) -> int | None:
        """Take up to the free slots without blocking; None when the queue is paused."""
        w = self.link
        ctx = w.ctx
        assert ctx is not None
        n = w.slots.reserve()
        ticket, flat = self.order.ticket(), []
        try:
            reply = await fetch.complete_and_fetch_next(
                ctx, now_ms(), w.consumer, n, w.emit_flag, (), w.limiter
            )
            flat = reply[1]
        finally:
            self.order.deliver(ticket, flat, n)
        if len(reply) > 4 and reply[4]:
            self.quarantined(reply[4])
        self.limited_ms = int(reply[3]) if len(reply) > 3 else 0
        if reply[2] == 1:
            return None
        return len(reply[1]) // 3

    async def fetch_blocking(self) -> None:
        """Wait on the dedicated client for new entries, then activate them."""
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
        try:
            try:
                reply = await blocking.xreadgroup(
                    {w.keys.stream: ">"},
                    "workers",
                    w.consumer,
                    StreamReadGroupOptions(block_ms=w.opts.block_timeout, count=n),
                )
            except _GlideError as exc:
                if w.closing:
                    return
                raise to_glidemq_error(exc, "blocking read") from exc
            if not reply:
                return
            pairs: list[str] = []  # entry id, job id, ...
            foreign: list[bytes] = []  # no job id: the library moves them to quarantine
            for entries in reply.values():
                for entry_id, fields in entries.items():
                    job_id = next(
                        (v for k, v in (fields or []) if k == b"id"), b""
                    )  # entry fields are [[field, value], ...]
                    pairs += [entry_id.decode(), job_id.decode()]
                    if fields and not job_id:
                        foreign.append(entry_id)
            if w.paused:  # paused while the read was blocked: hand the entries back
                await fetch.defer_active(ctx, w.consumer, pairs)
            else:
                ticket, flat, held = self.order.ticket(), [], 0
                try:
                    flat = await fetch.move_to_active(ctx, now_ms(), w.emit_flag, w.limiter, pairs)
                finally:
                    self.order.deliver(ticket, flat, n)
            if foreign:
                self.quarantined(foreign)
        finally:
            w.slots.release(held)
