"""When a dead worker process's replacement starts: the supervisor's restart policy.

- A process killed from outside after it was ready (SIGKILL by an operator or the OOM
  killer, SIGTERM from someone else) is replaced at once, however often it happens: a kill
  storm must not empty the fleet.
- A process that dies before it is ready, or crashes on its own (an exit code, SIGSEGV), is
  counted against its slot; repeated deaths of one slot within CRASH_WINDOW space its
  restarts out (0.1 s doubling, at most MAX_DELAY). Other slots are not affected.
- Whatever the delays, a fleet with no live process starts one within EMPTY_FLOOR.
- BOOT_LOOP_LIMIT boot failures in a row with no ready process left: the supervisor halts
  with its boot exit code instead of retrying forever.
"""

from __future__ import annotations

import signal
from collections import deque
from dataclasses import dataclass, field

__all__ = ["BOOT_LOOP_LIMIT", "CRASH_WINDOW", "EMPTY_FLOOR", "MAX_DELAY", "RestartPolicy"]

CRASH_WINDOW = 60.0
MAX_DELAY = 30.0
EMPTY_FLOOR = 1.0
BOOT_LOOP_LIMIT = 5
# Signals that come from outside the process: it did not crash, something stopped it.
EXTERNAL_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP}
)


@dataclass
class _Slot:
    deaths: deque[float] = field(default_factory=deque)
    next_spawn_at: float = 0.0


class RestartPolicy:
    """Per-slot crash history and the earliest time each slot may start a process again."""

    def __init__(self) -> None:
        self._slots: dict[int, _Slot] = {}
        self.boot_failures = 0  # in a row, since a process last became ready

    def due(self, slot: int) -> float:
        """Monotonic time from which `slot` may start a process."""
        s = self._slots.get(slot)
        return 0.0 if s is None else s.next_spawn_at

    def ready(self) -> None:
        """A process became ready: the fleet is not in a boot loop."""
        self.boot_failures = 0

    def boot_failed(self) -> int:
        """Count a failed start; returns how many in a row."""
        self.boot_failures += 1
        return self.boot_failures

    def died(self, slot: int, *, ready: bool, exit_code: int, now: float) -> float:
        """Record an unexpected death in `slot`; the delay before its replacement starts."""
        if ready and exit_code < 0 and -exit_code in EXTERNAL_SIGNALS:
            return 0.0  # killed from outside while working: replace it now
        s = self._slots.setdefault(slot, _Slot())
        s.deaths.append(now)
        while s.deaths and now - s.deaths[0] > CRASH_WINDOW:
            s.deaths.popleft()
        recent = len(s.deaths)
        delay = 0.0 if recent <= 1 else min(MAX_DELAY, 0.1 * 2 ** (recent - 2))
        s.next_spawn_at = max(s.next_spawn_at, now + delay)
        return delay
