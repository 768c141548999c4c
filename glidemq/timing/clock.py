"""The clock job times come from (ms), and how the worker's timers wait.

The wall clock is shared with other processes and languages, so delays, TTLs and retention
assume the clocks of producers and workers roughly agree. An in-process server
(glidemq.memory) brings a clock of its own: Queue and Worker read time and sleep through the
`Clock` of their connection, so a test's manual clock moves them too.

Durations inside the process (leases, hold windows, retry budgets, watchdog silences) are read
with `monotonic()` and `perf_counter()` here, never from `time` directly: the deterministic
simulator (glidemq.sim) points both at its virtual clock with `use_monotonic`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "WALL_CLOCK",
    "Clock",
    "WallClock",
    "monotonic",
    "now_ms",
    "perf_counter",
    "use_monotonic",
]

_monotonic: Callable[[], float] = time.monotonic
_perf_counter: Callable[[], float] = time.perf_counter


def monotonic() -> float:
    """Seconds on the process's monotonic clock (the simulator's virtual time under it)."""
    return _monotonic()


def perf_counter() -> float:
    """A fine-grained monotonic clock for timing runs (the simulator's virtual time under it)."""
    return _perf_counter()


def use_monotonic(source: Callable[[], float] | None) -> None:
    """Read `monotonic()` and `perf_counter()` from `source` (seconds); None: the real clocks."""
    global _monotonic, _perf_counter
    if source is None:
        _monotonic, _perf_counter = time.monotonic, time.perf_counter
    else:
        _monotonic = _perf_counter = source


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
