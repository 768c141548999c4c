"""The progress line glidemq-run prints on a terminal: processes, completions and their
rate, failures, running jobs, memory, restarts, every `interval` seconds."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

__all__ = ["StatusLine"]


class StatusLine:
    """Prints a status line at most every `interval` s (0: never), only to a terminal."""

    __slots__ = ("_completed", "_last", "interval")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last = time.monotonic()
        self._completed = 0

    def tick(self, totals: Callable[[], dict[str, int]], target: int) -> None:
        """Print the line if it is due; `totals` is asked only then."""
        if self.interval <= 0 or not sys.stderr.isatty():
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        t = totals()
        rate = (t["completed"] - self._completed) / (now - self._last)
        self._last, self._completed = now, t["completed"]
        sys.stderr.write(
            f"glidemq-run: {t['processes']}/{target} procs | completed {t['completed']} "
            f"({rate:,.0f}/s) | failed {t['failed']} | active {t['active']} | "
            f"rss {t['rss'] / 2**20:.0f} MB | restarts {t['restarts']}\n"
        )
