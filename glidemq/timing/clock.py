"""The clock job times come from (ms), and how the worker's timers wait.

The wall clock is shared with other processes and languages, so delays, TTLs and retention
assume the clocks of producers and workers roughly agree. An in-process server
(glidemq.memory) brings a clock of its own: Queue and Worker read time and sleep through the
`Clock` of their connection, so a test's manual clock moves them too.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["WALL_CLOCK", "Clock", "WallClock", "now_ms"]


def now_ms() -> int:
    """Wall-clock time in ms: job timestamps are shared with other processes and languages."""
    return int(time.time() * 1000)


class Clock(Protocol):
    """Where a queue's times come from, and how its worker's timers wait."""

    def now_ms(self) -> int:
        """The time in ms since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of real time, or less when this clock's time jumps."""
        ...


class WallClock:
    """Real time: `time.time()` and `asyncio.sleep`."""

    def now_ms(self) -> int:
        return now_ms()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "WallClock()"


WALL_CLOCK = WallClock()
"""The clock of every connection to a Valkey server."""
