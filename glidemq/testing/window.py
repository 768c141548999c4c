"""The starts counted against one rate limit of an in-memory queue, kept as the server keeps
them (see `SLIDING_MAX` in glidemq.limit_options), without the server's guard (`rate_guard`): in
memory a job starts at the very time its start is counted."""

from __future__ import annotations

from collections import deque

from ..limit_options import SLIDING_MAX

__all__ = ["RateWindow"]


class RateWindow:
    """The starts counted against one rate limit, as the server keeps them: a sliding log of
    start times while `max <= SLIDING_MAX`, a fixed window (start, count) above it."""

    __slots__ = ("count", "log", "start")

    def __init__(self) -> None:
        self.log: deque[int] = deque()
        self.start = 0
        self.count = 0

    def reset(self) -> None:
        """Forget every start."""
        self.log.clear()
        self.start = self.count = 0

    def room(self, max_: int, duration: int, now: int) -> tuple[int, int]:
        """Starts allowed now, and when none, the ms until one is."""
        if max_ <= SLIDING_MAX:
            log = self.log
            span = duration  # no guard: in memory a job starts at its stamp
            while log and log[0] <= now - span:
                log.popleft()
            if len(log) < max_:
                return max_ - len(log), 0
            return 0, max(1, log[len(log) - max_] + span - now)
        if now >= self.start + duration:
            self.start, self.count = now, 0
        if self.count >= max_:
            return 0, self.start + duration - now
        return max_ - self.count, 0

    def charge(self, max_: int, duration: int, now: int, used: int) -> None:
        """Count `used` starts at `now`."""
        if max_ <= SLIDING_MAX:
            self.log.extend([now] * used)
            return
        if now >= self.start + duration:
            self.start, self.count = now, 0
        self.count += used
