"""Clocks of an in-memory server: real time by default, or a manual clock tests advance."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Where the in-memory queues read the time (ms since the epoch)."""

    @property
    def manual(self) -> bool:
        """True when time moves only by `advance`; then nothing waits in real time for it."""
        ...

    def now_ms(self) -> int:
        """The time in ms."""
        ...

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever the time jumps (never called for real time)."""
        ...


class SystemClock:
    """Wall-clock time, as the real engine uses for job timestamps."""

    manual = False

    def now_ms(self) -> int:
        """The wall clock in ms."""
        return int(time.time() * 1000)

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Real time never jumps: nothing to notify."""

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that stands still until the test moves it.

    `advance(ms)` moves it forward; delayed jobs, retry backoffs, ttl deadlines, retention
    ages, `clean` grace periods and throttle windows then see the new time at once, and
    waiting workers wake up to run whatever became due.
    """

    manual = True

    def __init__(self, start_ms: int | None = None) -> None:
        self._now = int(time.time() * 1000) if start_ms is None else int(start_ms)
        self._listeners: list[Callable[[], None]] = []

    def now_ms(self) -> int:
        """The clock's time in ms; it moves only by `advance` and `set`."""
        return self._now

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever the clock moves."""
        self._listeners.append(listener)

    def advance(self, ms: int) -> int:
        """Move the clock `ms` milliseconds forward; returns the new time."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            from ..errors import ValidationError

            raise ValidationError("ms", "must be an integer >= 0")
        self._now += ms
        for listener in list(self._listeners):
            listener()
        return self._now

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms`; the clock never goes back."""
        self.advance(max(0, int(now_ms) - self._now))

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"
