"""RunBudget: how many runs may wait queued, as a time budget at the recent run time.

Both windows that let work wait behind busy slots use it: a Worker's hold window (jobs held
beyond its concurrency, glidemq.worker.hold) and the sandbox pool's prefetch window (runs queued in
a child, glidemq.sandbox.prefetch_window). About `window` seconds of work may wait for
`slots` slots, at the moving average of run times, never more than `depth` runs: short runs
get the whole depth, runs longer than the window none.
"""

from __future__ import annotations

__all__ = ["RunBudget"]

_AVERAGE_WEIGHT = 0.125  # of the newest run in the moving average of run times


class RunBudget:
    """The queue depth `window` seconds of work allow for `slots` slots (`limit`); `cold`
    runs until a run has been timed."""

    __slots__ = ("_average", "depth", "limit", "slots", "window")

    def __init__(self, window: float, depth: int, *, slots: int = 1, cold: int = 0) -> None:
        self.window = window
        self.depth = depth
        self.slots = slots
        self.limit = min(depth, cold)
        """Runs that may wait now."""
        self._average: float | None = None

    @property
    def run_time(self) -> float | None:
        """The moving average of run durations (seconds), None before the first."""
        return self._average

    def timed(self, seconds: float) -> None:
        """Count a run's duration in the average that sets `limit`."""
        average = self._average
        average = seconds if average is None else average + (seconds - average) * _AVERAGE_WEIGHT
        self._average = average
        work = self.slots * self.window
        self.limit = self.depth if work >= average * self.depth else int(work / average)
