"""Pacer: a worker's own limiter on its monotonic clock (glidemq.worker.limits uses it)."""

from __future__ import annotations

from collections import deque

from ..options.limits import SLIDING_MAX, RateLimit

__all__ = ["Pacer"]


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

    def wait(self, now: float) -> float:
        """Seconds after `now` (seconds, the clock `record` is given) until one more start
        fits in the window (0: now)."""
        if len(self._log) < self._max:
            return 0.0
        return max(0.0, self._log[0] + self._span - now)

    def record(self, at: float) -> None:
        """Count a start at monotonic time `at` (the latest so far)."""
        self._log.append(at)
