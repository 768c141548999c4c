"""Intake: the one owner of a Worker's completions on their way out and of what they bring
back. Completions that finish in one event-loop iteration go out together; each flush is
one glidemq_completeAndFetchNext that stores them and takes the next jobs for the slots it
reserved; up to `MAX_FLUSHES_IN_FLIGHT` flushes run at once, so the server works on one
while this process runs the jobs of another. Fetched jobs are handed on in the order their
calls were sent (`InOrder`); what a reply says about the queue goes to the fetch loop
(`Fetcher.took`). A flush also carries the start report of held jobs about to start, and a
flush goes out for a report alone when none is due (glidemq/worker/starts.py). The Worker
keeps the lifecycle, running and failing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import DurabilityError
from ..timing.clock import monotonic
from ..wire import fetch as wire_fetch
from .starts import CONFIRM_AFTER

if TYPE_CHECKING:
    from ..job.job import Job
    from .fetcher import Fetcher, InOrder
    from .forget import LostFetches
    from .link import WorkerLink
    from .starts import Recording, StartReports

__all__ = ["MAX_FLUSHES_IN_FLIGHT", "Intake", "Pending"]

log = logging.getLogger("glidemq.worker")

MAX_FLUSHES_IN_FLIGHT = 4
"""Completion flushes sent and not answered yet, at most."""


Pending = tuple["Job[Any, Any]", bytes, tuple[int, int]]
"""A completion waiting to go out: the job, its encoded result, its retention (count, age)."""


class Intake:
    """Completions of one Worker (`complete`), their flushes of `size` jobs each, and the
    background server calls close waits for (`spawn`, `tasks`). `completed(job)` is called
    for each completion the server stored; `recorded()` once a call carrying a start report
    was answered, recorded or failed (held jobs may start then)."""

    def __init__(
        self,
        link: WorkerLink,
        order: InOrder,
        size: int,
        completed: Callable[[Job[Any, Any]], None],
        starts: StartReports,
        recorded: Callable[[], None],
        lost: LostFetches,
    ) -> None:
        self.link = link
        self.order = order
        self.size = size
        self.completed = completed
        self.starts = starts
        self.lost = lost
        self.recorded = recorded
        self.fetcher: Fetcher | None = None  # set by the Worker once both exist
        self.tasks: set[asyncio.Task[None]] = set()
        self._pending: list[Pending] = []
        self._scheduled = False
        self._flushes = 0
        self._confirm: asyncio.TimerHandle | None = None
        self._confirm_due = False

    def completing(self) -> bool:
        """Whether completions are queued or on their way (they fetch jobs as well)."""
        return bool(self._flushes or self._pending)

    def has_work(self) -> bool:
        """Whether anything is still to send or to wait for (close drains it)."""
        return bool(self._pending or self.tasks)

    def complete(self, job: Job[Any, Any], rv: bytes, keep: tuple[int, int]) -> None:
        """Queue a success; completions of one loop iteration go out together."""
        self._pending.append((job, rv, keep))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.kick)

    def confirm_soon(self, delay: float = CONFIRM_AFTER) -> None:
        """A run began: confirm its start once it lasted CONFIRM_AFTER, by a flush of its own
        when no other call does (glidemq/worker/starts.py)."""
        if self._confirm is None:
            self._confirm = asyncio.get_running_loop().call_later(delay, self._confirm_now)

    def _confirm_now(self) -> None:
        self._confirm = None
        slots = self.link.slots
        if slots.confirms_pending():
            self._confirm_due = True
            self.report()
            # runs that began meanwhile: when the next of them is due, not a whole period
            # later (a death in between would leave its start unsure)
            wait = slots.next_confirm_in(CONFIRM_AFTER)
            self.confirm_soon(CONFIRM_AFTER if wait is None else wait)

    def report(self) -> None:
        """Held jobs wait for their start to be recorded: send a flush for it soon (with
        the completions of this loop iteration, if any)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.kick)

    def spawn(self, call: Awaitable[None]) -> None:
        """Run a call to the server in the background; close waits for it."""
        task = asyncio.ensure_future(call)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def kick(self) -> None:
        """Send queued completions, `size` per flush, while fewer than the most are out;
        each flush also fetches for the slots it can reserve (none while closing or
        paused)."""
        self._scheduled = False
        link, size, starts = self.link, self.size, self.starts
        loop = asyncio.get_running_loop()
        while self._flushes < MAX_FLUSHES_IN_FLIGHT and (
            self._pending
            or self._confirm_due
            or (starts.wanted() and not (link.closing or link.paused))
        ):
            batch, self._pending = self._pending[:size], self._pending[size:]
            fetch = 0 if (link.closing or link.paused) else link.slots.reserve(size)
            rec = starts.for_call(fetch)
            self._confirm_due = False
            if not batch and not rec.pairs and not rec.confirmed:  # nothing to send after all
                link.slots.release(fetch)
                starts.delivered(rec)
                break
            self._flushes += 1
            task = loop.create_task(self._flush(batch, fetch, rec))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        """Send everything queued and wait until every flush and background call is done."""
        while self.has_work():
            self.kick()
            if self.tasks:
                await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def _stored_batch(self, batch: list[Pending], statuses: list[bytes]) -> None:
        """The server answered a flush of `batch`: one status per completion."""
        slots = self.link.slots
        for (job, _, _), status in zip(batch, statuses, strict=True):
            slots.drop(job.entry_id)
            if status == b"ok":
                self.completed(job)
            elif status == b"stale":
                log.info("glidemq: job %s was reclaimed by another worker; result dropped", job.id)

    async def _flush(self, batch: list[Pending], fetch: int, rec: Recording) -> None:
        link, slots = self.link, self.link.slots
        ctx = link.ctx
        assert ctx is not None
        completions = [
            (job.id, job.entry_id or "", rv, keep_count, keep_age)
            for job, rv, (keep_count, keep_age) in batch
        ]
        ticket = self.order.ticket() if fetch else -1
        fetched: list[Any] = []
        token = self.lost.token() if fetch else None
        hook, ambiguous = self.lost.watch()
        sent = monotonic()
        ok = dropped = False
        try:
            try:
                # Transient faults are retried inside fcall, within the connection's budget.
                got = await wire_fetch.complete_and_fetch_next(
                    ctx,
                    ctx.now_ms(),
                    link.consumer,
                    fetch,
                    link.emit_flag,
                    completions,
                    link.limiter,
                    rec.start_now,
                    rec.pairs,
                    rec.confirmed,
                    token,
                    hook,
                )
                ok = True
            except DurabilityError as exc:
                # Stored on the primary but not confirmed: an error naming the jobs, never
                # "completed"; the jobs the call took are run (the server ran the call: its
                # start report is recorded there).
                link.events.emit("error", exc.naming([job.id for job, _, _ in batch]))
                for job, _, _ in batch:
                    slots.drop(job.entry_id)
                dropped = ok = True
                got = wire_fetch.fetched_of(exc.reply)
            except Exception as exc:  # any failure: the batch must not keep its entries
                link.fault(exc, "storing completions")
                # The jobs stay in the PEL; stall recovery runs them again.
                return
            else:
                self._stored_batch(batch, got.statuses)
                dropped = True
            fetched = got.entries
            if self.fetcher is not None:
                self.fetcher.took(got, fetch)
        except Exception as exc:  # a fault here must not leave the batch held either
            link.fault(exc, "handling a completion reply")
        finally:
            if token is not None and ambiguous():
                self.lost.lost(token, fetched)
            if not dropped:  # a failure anywhere above: nothing of the batch stays held
                for job, _, _ in batch:
                    slots.drop(job.entry_id)
            self._flushes -= 1
            self.starts.answered(rec, ok, sent)
            if not self._scheduled and (self._pending or self._confirm_due or self.starts.wanted()):
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self.kick)
            slots.wake()
            if ticket >= 0:  # its reserved slots are released once its jobs started
                self.order.deliver(ticket, fetched, fetch, sent, rec)
            else:
                self.starts.delivered(rec)
            if rec.pairs:  # recorded, or failed (then a held job recorded before may start)
                self.recorded()
