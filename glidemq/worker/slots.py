"""The slots of one Worker and the jobs it holds: the single owner of both.

A slot is one job the worker may hold at once. A slot is *running* from the moment a fetched
job is started until its outcome is known (completion queued, failure recorded, handed back),
*reserved* while a fetch that may bring a job for it is in flight, and *free* otherwise. A
sandbox pool may add slots for runs it would queue in its children (`SlotExtension`).

The job table maps each stream entry the worker holds in the PEL to its job and the task
running it; the heartbeat, the watchdog and close read it, and a finished job leaves it. Every
change that may free a slot wakes the fetch loop (`wake`).

A job taken beyond the concurrency (see `hold`), or one whose lease ran out before it
started (`lease`), is *held*: it takes a slot like a running job, sits in the job
table without a task, and waits in order until it may start (`next_held`); `executing`
counts only the jobs actually running. Each held job keeps the monotonic time its lease
started (the send time of the call that delivered or last renewed it), and whether the
server has recorded its start: a held job starts only once it has (glidemq/worker/starts.py);
until then it is *unrecorded*, and *reporting* while a call carries its start report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import suppress
from typing import Any, Generic, Protocol, TypeVar

from ..timing.clock import monotonic

__all__ = ["SlotExtension", "Slots"]


class _Identified(Protocol):
    id: str


J = TypeVar("J", bound=_Identified)


class SlotExtension(Protocol):
    """Slots beyond the worker's concurrency (the sandbox pool's pipelining)."""

    @property
    def accepting(self) -> bool:
        """Whether jobs may be taken at all (False: they stay in the queue)."""
        ...

    @property
    def pipeline_slots(self) -> int:
        """Runs that may be taken beyond the concurrency right now."""
        ...


class Slots(Generic[J]):
    """Slot accounting and the job table of one Worker.

    `capacity` is how many jobs may run at once; `prefetch` is the most one fetch may take.
    """

    __slots__ = (
        "_began",
        "_exact_only",
        "_extension",
        "_finishing",
        "_held",
        "_jobs",
        "_reporting",
        "_reserved",
        "_revoked",
        "_running",
        "_suspect",
        "_unrecorded",
        "_wake",
        "capacity",
        "prefetch",
    )

    def __init__(
        self, capacity: int, prefetch: int, *, extension: SlotExtension | None = None
    ) -> None:
        self.capacity = capacity
        self.prefetch = prefetch
        self._extension = extension
        self._running = 0
        self._reserved = 0
        self._jobs: dict[str, tuple[J, asyncio.Task[Any] | None]] = {}
        self._revoked: set[str] = set()
        self._held: dict[str, float] = {}  # held entry id -> its lease's start, oldest first
        self._finishing: set[str] = set()  # entries whose failure is on its way to the server
        self._unrecorded: set[str] = set()  # held entries whose start the server has not recorded
        self._reporting: set[str] = set()  # ... and whose start report is on its way
        self._exact_only: set[str] = set()  # ... suspect: reported alone, when it may start
        self._suspect: str | None = None  # the suspect reported: running, or about to
        self._began: dict[str, float] = {}  # runs under way, start not confirmed: since when
        self._wake = asyncio.Event()

    # -- counting -------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Slots taken by jobs whose outcome is not known yet."""
        return self._running

    @property
    def reserved(self) -> int:
        """Slots promised to fetches in flight."""
        return self._reserved

    @property
    def executing(self) -> int:
        """Jobs running now: the running slots less the held jobs."""
        return self._running - len(self._held)

    def free(self) -> int:
        """Slots neither running a job nor promised to a fetch in flight (with a sandbox,
        plus the runs it would queue in its children now; none before a child is ready)."""
        free = self.capacity - self._running - self._reserved
        ext = self._extension
        if ext is not None:
            if not ext.accepting:
                return 0  # no child has loaded the processor: jobs stay in the queue
            free += ext.pipeline_slots
        return free

    def reserve(self, most: int | None = None) -> int:
        """Promise up to `most` (and `prefetch`) free slots to a fetch; returns how many
        (>= 0). The fetch `release`s them once its reply is handled (its jobs `start`
        before that)."""
        n = max(0, min(self.free(), self.prefetch, self.prefetch if most is None else most))
        self._reserved += n
        return n

    def release(self, n: int) -> None:
        """A fetch that reserved `n` slots is done."""
        self._reserved -= n

    def start(self, n: int = 1) -> None:
        """`n` fetched jobs start: they take their slots until `end`."""
        self._running += n

    def end(self, n: int = 1) -> None:
        """`n` jobs' outcomes are known: their slots are free again (the job table may still
        hold them until the outcome reaches the server)."""
        self._running -= n

    # -- the job table --------------------------------------------------------------------

    def hold(self, entry_id: str, job: J, task: asyncio.Task[Any] | None) -> None:
        """Record that the worker holds `job` (entry `entry_id`), run by `task` (None while
        it waits for its batch)."""
        self._jobs[entry_id] = (job, task)

    def holds(self, entry_id: str) -> bool:
        """Whether the worker holds the stream entry `entry_id`."""
        return entry_id in self._jobs

    def drop(self, entry_id: str | None) -> None:
        """The job of `entry_id` left the worker (its outcome reached the server, or it was
        handed back or taken over)."""
        self._jobs.pop(entry_id or "", None)
        self._finishing.discard(entry_id or "")
        self._began.pop(entry_id or "", None)
        self._forget_held(entry_id or "")

    def finish(self, entry_id: str | None) -> None:
        """`drop` the job and wake the fetch loop."""
        self.drop(entry_id)
        self._wake.set()

    def finishing(self, entry_id: str) -> None:
        """The failure of the try of `entry_id` is being sent. The server acks the entry with
        it, so a heartbeat sent after it would find the entry gone and report the job lost,
        cancelling a later try of the same job: heartbeats leave the entry out
        (`renewable`), and `abort` leaves its task alone."""
        if entry_id in self._jobs:
            self._finishing.add(entry_id)

    def renewable(self) -> list[tuple[str, J]]:
        """(entry id, job) of every job held whose outcome is not on its way yet: what a
        heartbeat keeps alive."""
        finishing = self._finishing
        return [(e, job) for e, (job, _) in self._jobs.items() if e not in finishing]

    def jobs(self) -> list[tuple[str, J]]:
        """(entry id, job) of every job held, in the order they were taken."""
        return [(entry_id, job) for entry_id, (job, _) in self._jobs.items()]

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The tasks running held jobs (a batch's task once), not done yet."""
        return list({t for _, t in self._jobs.values() if t is not None and not t.done()})

    def held(self) -> list[tuple[J, asyncio.Task[Any] | None]]:
        """(job, task) of every job held."""
        return list(self._jobs.values())

    def clear(self) -> None:
        """Forget every job held (the worker closed and handed them back)."""
        self._jobs.clear()
        self._held.clear()
        self._finishing.clear()
        self._unrecorded.clear()
        self._reporting.clear()
        self._exact_only.clear()
        self._suspect = None
        self._began.clear()

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._jobs))

    # -- held jobs ------------------------------------------------------------------------

    @property
    def held_count(self) -> int:
        """Jobs taken beyond the concurrency that wait for a running job to end."""
        return len(self._held)

    def hold_back(
        self,
        entry_id: str,
        job: J,
        leased: float,
        recorded: bool = True,
        exact_only: bool = False,
    ) -> None:
        """Hold a started job (its slot counted by `start`) until `next_held` gives it;
        `leased`: when its lease started (monotonic seconds); `recorded`: whether the server
        has recorded its start already (else it waits for a start report); `exact_only`: a
        suspect job, reported alone (glidemq/worker/starts.py)."""
        self._jobs[entry_id] = (job, None)
        self._held[entry_id] = leased
        if not recorded:
            self._unrecorded.add(entry_id)
            if exact_only:
                self._exact_only.add(entry_id)

    def first_leased(self) -> float | None:
        """When the lease of the job `next_held` gives started, or None when no held job's
        start is recorded."""
        unrecorded = self._unrecorded
        for entry_id, leased in self._held.items():
            if entry_id not in unrecorded or entry_id not in self._jobs:
                return leased
        return None

    def next_held(self) -> tuple[str, J] | None:
        """The oldest held job whose start the server has recorded, no longer held (the
        caller starts it), or None: none is. Jobs before it that wait for their start to be
        recorded stay held: a suspect's start is reported only once no recorded one waits
        (`to_report`), so a recorded job held behind it must not wait for it."""
        unrecorded, jobs = self._unrecorded, self._jobs
        gone: list[str] = []
        found = None
        for entry_id in self._held:
            held = jobs.get(entry_id)
            if held is None:
                gone.append(entry_id)
            elif entry_id not in unrecorded:
                found = entry_id, held[0]
                break
        for entry_id in gone:
            del self._held[entry_id]
        if found is not None:
            del self._held[found[0]]
        return found

    # -- what the server knows of held jobs' starts (glidemq/worker/starts.py) -----------

    @property
    def recorded_held(self) -> int:
        """Held jobs whose start the server has recorded: they start as slots free."""
        return len(self._held) - len(self._unrecorded)

    @property
    def reporting_count(self) -> int:
        """Held jobs whose start report is on its way."""
        return len(self._reporting)

    def unreported(self) -> bool:
        """Whether a held job's start is neither recorded nor on its way."""
        return len(self._unrecorded) > len(self._reporting)

    @property
    def unreported_count(self) -> int:
        """Held jobs whose start is neither recorded nor on its way."""
        return len(self._unrecorded) - len(self._reporting)

    def to_report(self, now: int, ahead: int) -> list[str]:
        """Held jobs, oldest first, whose start is neither recorded nor being reported: up to
        `now` for the free slots, then up to `ahead` more; a suspect's (exact-only) alone, and
        only when no job runs, and none after it.
        Entry and job id after each other, marked as being reported."""
        out: list[str] = []
        if now + ahead <= 0 or not self._unrecorded or self._suspect is not None:
            return out  # (a suspect's report is on its way, or it runs: nothing beside it)
        unrecorded, reporting, jobs, exact = self._unrecorded, self._reporting, self._jobs, None
        for entry_id in self._held:
            if entry_id not in unrecorded or entry_id in reporting:
                continue
            n = len(out) // 2
            if n >= now + ahead:
                break
            if entry_id in self._exact_only:  # it runs alone: once nothing else does
                # (nor waits to: a held job whose start is recorded goes first)
                if n or now <= 0 or self.executing or self._suspect is not None:
                    break
                if len(self._held) > len(self._unrecorded):
                    break
                exact = entry_id
                reporting.add(entry_id)
                out += (entry_id, jobs[entry_id][0].id)
                break
            reporting.add(entry_id)
            out += (entry_id, jobs[entry_id][0].id)
        if exact is not None:
            self._suspect = exact
        return out

    def began(self, entry_id: str | None) -> None:
        """The run of the job under `entry_id` got control: once it has lasted a moment, a
        call confirms its start (`to_confirm`)."""
        if entry_id:
            self._began[entry_id] = monotonic()

    def ran(self, entry_id: str | None) -> None:
        """The run of the job under `entry_id` ended (a suspect's: the others may start)."""
        if entry_id:
            self._began.pop(entry_id, None)
            if entry_id == self._suspect:
                self._suspect = None

    def confirms_pending(self) -> bool:
        """Whether runs are under way whose start the server has not been told about."""
        return bool(self._began)

    def next_confirm_in(self, after: float) -> float | None:
        """Seconds until the next run under way, unconfirmed and younger than `after`,
        reaches that age (None: there is none)."""
        due = monotonic() - after
        for at in self._began.values():  # in the order the runs began
            if at > due:
                return at - due
        return None

    def to_confirm(self, after: float) -> list[str]:
        """Entry and job id pairs of the runs under way for `after` seconds or more whose
        start is not confirmed yet; younger runs wait for a later call."""
        if not self._began:
            return []
        out: list[str] = []
        jobs, began = self._jobs, self._began
        due = monotonic() - after
        for entry_id, at in list(began.items()):
            if at > due:
                continue
            del began[entry_id]
            held = jobs.get(entry_id)
            if held is not None and entry_id not in self._finishing:
                out += (entry_id, held[0].id)
        return out

    def unconfirmed(self, pairs: list[str]) -> None:
        """The call confirming `pairs` failed: the next one confirms them."""
        jobs, began = self._jobs, self._began
        for entry_id in pairs[::2]:
            if entry_id in jobs:
                began.setdefault(entry_id, 0.0)

    def isolating(self) -> bool:
        """Whether a suspect job's start was reported: it runs alone, nothing else starts
        until its run ends (glidemq/worker/starts.py)."""
        return self._suspect is not None

    def take_suspect(self) -> tuple[str, J, float] | None:
        """The suspect whose start was reported, no longer held (the caller starts it, alone),
        with when its lease started; None while no job may start: its start is not recorded
        yet, or other jobs run. Wherever it is among the held jobs: jobs held behind it, and
        one that came back held after a lease check, wait for its run to end."""
        entry_id = self._suspect
        if entry_id is None or self.executing or entry_id in self._unrecorded:
            return None
        leased = self._held.pop(entry_id, None)
        held = self._jobs.get(entry_id)
        if leased is None or held is None:
            return None
        return entry_id, held[0], leased

    def suspect_waiting(self) -> bool:
        """Whether a suspect job is held, or runs."""
        return self._suspect is not None or bool(self._exact_only)

    def recorded(self, pairs: list[str], ok: bool) -> None:
        """The call carrying the start report `pairs` was answered (`ok`: the server recorded
        those starts) or failed (they are reported again)."""
        unrecorded, reporting = self._unrecorded, self._reporting
        for entry_id in pairs[::2]:
            reporting.discard(entry_id)
            if ok:
                unrecorded.discard(entry_id)
                self._exact_only.discard(entry_id)
            elif entry_id == self._suspect:
                self._suspect = None

    def _forget_held(self, entry_id: str) -> None:
        if self._unrecorded:
            self._unrecorded.discard(entry_id)
            self._reporting.discard(entry_id)
            self._exact_only.discard(entry_id)
        if entry_id == self._suspect:
            self._suspect = None

    def held_jobs(self) -> list[tuple[str, J]]:
        """(entry id, job) of every held job, oldest first."""
        jobs = self._jobs
        return [(e, jobs[e][0]) for e in self._held if e in jobs]

    def renew(self, entry_ids: list[str], sent: float) -> None:
        """A heartbeat sent at `sent` renewed these entries: their leases start there now."""
        held = self._held
        for entry_id in entry_ids:
            leased = held.get(entry_id)
            if leased is not None and leased < sent:
                held[entry_id] = sent

    def take_held(self) -> list[tuple[str, J]]:
        """Every held job, out of the table with its slot freed (to be handed back)."""
        taken = [(e, self._jobs.pop(e)[0]) for e in self._held if e in self._jobs]
        self._running -= len(self._held)
        self._held.clear()
        self._unrecorded.clear()
        self._reporting.clear()
        self._exact_only.clear()
        self._suspect = None
        self._wake.set()
        return taken

    # -- aborting -------------------------------------------------------------------------

    def abort(self, job_id: str, *, revoked: bool, entries: set[str] | None = None) -> bool:
        """Cancel the running tasks of job `job_id`; returns whether one was. A revoked job
        is marked so that its run fails with `revoked` (`take_revoked`); otherwise another
        worker owns it now and the job leaves the table (nothing is reported for it).
        `entries`: only runs under these stream entries (those a heartbeat asked about: a
        later try of the same job, delivered meanwhile, is not the one the server lost)."""
        cancelled = False
        for entry_id, (job, task) in list(self._jobs.items()):
            if entry_id in self._finishing:
                continue  # its failure is being recorded: that try is over
            if entries is not None and entry_id not in entries:
                continue
            if job.id == job_id and entry_id in self._held:
                # Not started: a revoked one fails when it would start; a lost one leaves.
                if revoked:
                    self._revoked.add(job_id)
                else:
                    del self._held[entry_id], self._jobs[entry_id]
                    self._forget_held(entry_id)
                    self._running -= 1
                    self._wake.set()
                cancelled = True
                continue
            if job.id != job_id or task is None or task.done():
                continue
            if revoked:
                self._revoked.add(job_id)
            else:
                self._jobs.pop(entry_id, None)
                self._forget_held(entry_id)
            task.cancel()
            cancelled = True
        return cancelled

    def take_revoked(self, job_id: str) -> bool:
        """Whether job `job_id` was cancelled because it was revoked (asked once)."""
        if job_id in self._revoked:
            self._revoked.discard(job_id)
            return True
        return False

    def is_revoked(self, job_id: str) -> bool:
        """Whether job `job_id` was cancelled because it was revoked."""
        return job_id in self._revoked

    # -- waking the fetch loop ------------------------------------------------------------

    def wake(self) -> None:
        """A slot may have freed, or the worker's state changed: let the fetch loop look."""
        self._wake.set()

    async def wait(self, timeout: float | None = None) -> None:
        """Wait for the next `wake` (at most `timeout` seconds)."""
        self._wake.clear()
        if timeout is None:
            await self._wake.wait()
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
