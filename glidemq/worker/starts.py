"""What the server knows of a Worker's starts: start reports for held jobs.

Stall recovery charges a stall (`stalledCount`, which fails a job past `max_stalled_count`)
only for a run it knows started. A held job (taken beyond the concurrency,
glidemq/worker/hold.py) starts later without a round trip, so the server cannot see that
start by itself. The worker tells it: each fetch says how many of the jobs it takes start
at once, the others are marked held on the server (job field heldEntry), and the calls the
worker makes anyway (completion flushes, which also fetch) carry a *start report*, the held
jobs about to start. A held job whose worker dies goes back uncharged.

A held job starts only once the server has recorded its start, that is after the answer to
the call that carried it (`Slots.recorded`). Submitting the call is not enough: a process
that kills itself right after may die before its client wrote the request.

A recorded start still leaves a doubt when the worker dies before a later call confirmed it
(calls confirm the runs that have lasted CONFIRM_AFTER): the job may not have got to run
(the reply was on its way, or the job that killed the worker ran first), or it is the one
that killed it. The server charges none of those (unsureEntry) and marks each such job
suspect: a suspect's start is held at every fetch and it runs alone, once its worker runs
nothing else, with nothing started beside it, so a death before its start was confirmed is
its own: that stall is charged with the unsure ones before it. A job that kills its worker
on every start thus fails after max_stalled_count + 1 runs, and the jobs beside it are not
charged for its deaths.

Waiting for the answer to a start report costs a held job up to one round trip after its
slot frees. Where that is a real share of a run (a round trip is an eighth of the recent
run time or more), the worker reports starts *ahead*: the next held jobs the slots start
within about two round trips, so they start at once. Slow jobs (the kill storm's 50 ms)
report nothing ahead.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..timing.clock import monotonic

if TYPE_CHECKING:
    from .hold import HoldWindow
    from .slots import Slots

__all__ = ["AHEAD_BELOW_SHARE", "ALL_RECORDED", "CONFIRM_AFTER", "Recording", "StartReports"]

CONFIRM_AFTER = 0.005
"""Seconds a run must have lasted before a call confirms its start: a job that kills its
worker at once is never confirmed. A confirmation goes with any call, or by itself once the
run lasted this long (`Intake.confirm_soon`)."""
AHEAD_BELOW_SHARE = 1 / 8
"""Report starts ahead once a round trip is this share of the recent run time or more:
below it, waiting one round trip per held start costs less than an eighth of a run."""
_AHEAD_TRIPS = 2  # round trips of expected starts reported ahead
_WEIGHT = 0.125  # of the newest round trip in their moving average


class Recording:
    """What one call asks the server to record: its start report (entry and job id pairs of
    held jobs about to start) and how many of the jobs it fetches start at once (None: all,
    each recorded as it starts). `counted`: those count as on their way until
    `StartReports.delivered`."""

    __slots__ = ("confirmed", "counted", "pairs", "start_now")

    def __init__(
        self, pairs: list[str], start_now: int | None, counted: bool, confirmed: list[str]
    ) -> None:
        self.pairs = pairs
        self.start_now = start_now
        self.counted = counted
        self.confirmed = confirmed
        """Entry and job id pairs of jobs whose run is under way (confirmed starts)."""


ALL_RECORDED = Recording([], None, False, [])
"""A fetch whose jobs all start at once (no hold window)."""


class StartReports:
    """The start reports of one Worker. Without a hold window (`window` None) every job a
    fetch takes starts at once, so nothing is reported."""

    __slots__ = ("_inflight", "_rtt", "slots", "window")

    def __init__(self, slots: Slots[Any], window: HoldWindow | None) -> None:
        self.slots = slots
        self.window = window
        self._inflight = 0  # starts recorded by fetches sent, their jobs not delivered yet
        self._rtt = 0.0  # moving average of a call's round trip, seconds

    @property
    def ahead(self) -> int:
        """Held jobs to report ahead of their start (see the module doc): the starts the
        slots make within two round trips at the recent run time, when a round trip is an
        eighth of a run or more."""
        window = self.window
        run = window.budget.run_time if window is not None else None
        if (
            window is None
            or not run
            or not math.isfinite(run)
            or self._rtt < run * AHEAD_BELOW_SHARE
        ):
            return 0
        return min(window.depth, math.ceil(_AHEAD_TRIPS * self._rtt * window.capacity / run))

    def _wanted(self) -> tuple[int, int]:
        """(starts for the free slots, starts ahead) the server should record now, beyond
        those recorded or on their way."""
        slots = self.slots
        free = slots.capacity - slots.executing
        stock = slots.recorded_held + slots.reporting_count + self._inflight
        now = max(0, free - stock)
        return now, max(0, free + self.ahead - stock - now)

    def wanted(self) -> bool:
        """Whether a call should go out for a start report now."""
        if self.window is None or not self.slots.unreported():
            return False
        now, ahead = self._wanted()
        return now + ahead > 0

    def for_call(self, fetch: int, *, report: bool = True) -> Recording:
        """What a call about to be sent that fetches up to `fetch` jobs asks the server to
        record. Held jobs waiting for their start go first, in the order they came; the
        jobs fetched start at once only for what is left. Without `report` (a blocking read,
        which may wait long), no start report and nothing counted on its way: a slot it
        counted on may be taken meanwhile, and then one of its jobs waits recorded."""
        if self.window is None:
            return ALL_RECORDED
        now, ahead = self._wanted()
        slots = self.slots
        pairs = slots.to_report(now, ahead) if report else []
        start_now = 0
        # no held job waits before the jobs fetched, and no suspect waits to run alone
        if not slots.unreported_count and not slots.suspect_waiting():
            start_now = max(0, min(fetch, now + ahead - len(pairs) // 2))
        if report:
            self._inflight += start_now
        confirmed = slots.to_confirm(CONFIRM_AFTER) if report else []
        return Recording(pairs, start_now, report, confirmed)

    def delivered(self, rec: Recording) -> None:
        """The jobs of the fetch that asked `rec` are started or held (or none came)."""
        if rec.counted:
            rec.counted = False
            self._inflight -= rec.start_now or 0

    def answered(self, rec: Recording, ok: bool, sent: float) -> None:
        """A call sent at `sent` (monotonic) that asked `rec` was answered (`ok`) or
        failed."""
        if rec.pairs:
            self.slots.recorded(rec.pairs, ok)
        if rec.confirmed and not ok:
            self.slots.unconfirmed(rec.confirmed)
        if ok and self.window is not None:
            rtt = monotonic() - sent
            self._rtt = rtt if not self._rtt else self._rtt + (rtt - self._rtt) * _WEIGHT
