"""Pipelining policy of the sandbox pool: which child a run may queue behind, when queued
runs come back, and whether to pipeline at all.

Besides the runs a child runs at once, the pool may send it `pipeline` more, which wait in
the child and start as soon as a slot frees, without a round trip through the worker. A
queued run is not started: its timeout starts with it, and when its child dies or gives it
back it goes to another child (`Child`, `NotStarted`). Runs queue only behind a child that
started a run within `pipeline_window`, and are taken back from one that has not since, so
a long job does not hold up the ones behind it. Pipelining is on only while runs are short
(their moving average is under the window): with long jobs the Worker holds no more jobs
than its concurrency, so they are not kept from other workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from .child import Child
from .protocol import TAKE
from .types import SandboxOptions

__all__ = ["Pipeline"]

_AVERAGE_WEIGHT = 0.125  # of the newest run in the moving average of run times


class Pipeline:
    """The pipelining state of one pool of `size` children."""

    def __init__(self, options: SandboxOptions, size: int, batch: bool) -> None:
        self.depth = 0 if batch else options.pipeline  # batches are one round trip already
        self.window = options.pipeline_window
        self.max_slots = size * self.depth
        self.slots = self.max_slots
        """Runs it would queue in children now: `max_slots` while runs are short, else 0."""
        self._run_time = 0.0  # moving average of run durations, seconds
        self._sweeper: asyncio.TimerHandle | None = None

    def queue_behind(self, ready: Iterable[Child], now: float) -> Child | None:
        """The child to queue a run on when every slot is taken: the least loaded one that
        started a run within the window; None when none may take it (or it is off)."""
        if not self.slots:
            return None
        best: Child | None = None
        limit = self.depth
        recent = now - self.window
        for child in ready:
            queued = len(child.queued)
            if queued < limit and child.last_start >= recent:
                best, limit = child, queued
        return best

    def timed(self, seconds: float) -> None:
        """Count a run's duration in the moving average that turns pipelining on and off."""
        self._run_time += (seconds - self._run_time) * _AVERAGE_WEIGHT
        short = self._run_time < self.window
        if short != bool(self.slots):
            self.slots = self.max_slots if short else 0

    def queued(self, loop: asyncio.AbstractEventLoop, children: Iterable[Child]) -> None:
        """A run was queued: make sure a sweep over `children` comes (see `sweep`)."""
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.window, self._sweep, loop, children)

    def _sweep(self, loop: asyncio.AbstractEventLoop, children: Iterable[Child]) -> None:
        """Take queued runs back from children that started nothing for a window (a long
        job runs there), so they go to the first child that is free; again while any child
        holds queued runs."""
        self._sweeper = None
        stale = loop.time() - self.window
        waiting = False
        for child in children:
            if not child.queued or child.channel is None:
                continue
            if child.state not in ("ready", "retiring"):
                continue
            waiting = True
            if child.last_start <= stale:
                ids = [inv.id for inv in child.queued.values() if not inv.taking]
                for inv_id in ids:
                    child.queued[inv_id].taking = True
                if ids:
                    child.channel.send({"t": TAKE, "ids": ids})
        if waiting:
            self.queued(loop, children)

    def close(self) -> None:
        """Stop sweeping."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
