"""A progress line for commands people wait on (glidemq-bench run, glidemq-chaos soak).

    progress = Progress(total=12, name="glidemq-bench")
    for step in steps:
        progress.start(f"process c=100 glidemq")      # [3/12] process c=100 glidemq ...
        ...
        progress.note("[3/12] process c=100 glidemq: 12,345 jobs/s")   # a line that stays
    progress.close()

On a terminal the line shows step k of n, the time elapsed and an estimate of the time left
(the mean time per finished step times the steps left), redrawn in place every second. Where
the output is not a terminal (CI logs, pipes) it draws nothing: only `note` lines appear.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self, TextIO

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Step k of `total`, elapsed, estimated time left; drawn on `stream` (default stderr)
    only when it is a terminal, unless `enabled` says otherwise."""

    def __init__(
        self,
        total: int,
        *,
        name: str = "",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        refresh: float = 1.0,
    ) -> None:
        self.total = max(0, total)
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self._clock = clock
        self._started = clock()
        self._step_started = self._started
        self.finished = 0  # steps done
        self.current = 0  # the step running now (1-based), 0 before the first
        self.label = ""
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._refresh = refresh

    # -- what a command calls ----------------------------------------------------------------

    def start(self, label: str) -> None:
        """Step `finished + 1` begins; `label` says what it is."""
        with self._lock:
            if self.current > self.finished:  # the previous step ended without `done`
                self.finished = self.current
            self.current = self.finished + 1
            self.label = label
            self._step_started = self._clock()
            self._draw()
        if self.enabled and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="glidemq-progress", daemon=True)
            self._ticker.start()

    def update(self, finished: int, label: str) -> None:
        """Progress counted in units rather than steps (e.g. jobs): `finished` of `total`
        are done and `label` says what is going on."""
        with self._lock:
            self.finished = max(0, min(finished, self.total))
            self.current = max(self.finished, 1)
            self.label = label
            self._draw()
        if self.enabled and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="glidemq-progress", daemon=True)
            self._ticker.start()

    def done(self) -> None:
        """The current step finished."""
        with self._lock:
            self.finished = max(self.finished, self.current)
            self._draw()

    def note(self, line: str) -> None:
        """Print a line that stays (a step's result), above the progress line; printed
        whether or not the progress line is drawn."""
        with self._lock:
            self._erase()
            print(line, file=self.stream, flush=True)
            self._draw()

    def close(self) -> None:
        """Stop redrawing and erase the line. Idempotent."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker = None
        with self._lock:
            self._erase()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the line ----------------------------------------------------------------------------

    def estimate(self) -> float | None:
        """Seconds left: the mean time of the finished steps times the steps not finished
        (None before the first step finished)."""
        if self.finished == 0:
            return None
        elapsed = self._clock() - self._started
        return elapsed / self.finished * max(0, self.total - self.finished)

    def text(self) -> str:
        """The progress line as it is drawn now."""
        elapsed = self._clock() - self._started
        left = self.estimate()
        head = f"{self.name}: " if self.name else ""
        step = min(max(self.current, 1), self.total) if self.total else self.current
        parts = [f"{head}[{step}/{self.total}] {self.label}", f"elapsed {format_duration(elapsed)}"]
        parts.append(f"about {format_duration(left)} left" if left is not None else "estimating")
        return ", ".join(parts)

    def _draw(self) -> None:
        if not self.enabled or self.current == 0:
            return
        line = self.text()
        pad = max(0, self._width - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._width = len(line)

    def _erase(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _tick(self) -> None:
        while not self._stop.wait(self._refresh):
            with self._lock:
                self._draw()
