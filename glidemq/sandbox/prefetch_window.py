"""The sandbox pool's prefetch window (its pipelining policy): how many runs a child may hold
queued, which child a run may queue behind, and when queued runs come back.

Besides the runs a child runs at once, the pool may send it more, which wait in the child
and start as soon as a slot frees, without a round trip through the worker. A queued run is
not started: its timeout starts with it, and when its child dies or gives it back it goes
to another child (`ChildHandle`, `NotStarted`).

How deep a child's queue may be is a time budget: about `pipeline_window` of work at the
recent run time (a moving average), and never more than `pipeline` runs. Short jobs get the
whole depth; jobs of a few ms get a few; jobs longer than the window get none, and the
Worker then holds no more jobs than its concurrency, so they are not kept from other
workers. Until a run has been timed, a child queues at most one. Runs queue only behind a
child that started a run within the window, and are taken back from one that has not since
(a long job runs there), which also counts as a long run in the average. So the Worker takes
jobs beyond its concurrency only for children that are free or moving (`open_slots`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..timing.run_budget import RunBudget
from .handle import ChildHandle
from .protocol import TAKE
from .types import SandboxOptions

__all__ = ["PrefetchWindow"]

_COLD_DEPTH = 1  # queued runs per child before any run was timed


class PrefetchWindow:
    """The pipelining state of one pool of `size` children."""

    def __init__(self, options: SandboxOptions, size: int, batch: bool) -> None:
        self.depth = 0 if batch else options.pipeline  # batches are one round trip already
        """The most runs a child holds queued (`SandboxOptions.pipeline`; 0 in batch mode)."""
        self.window = options.pipeline_window
        self.max_slots = size * self.depth
        self.budget = RunBudget(self.window, self.depth, cold=_COLD_DEPTH)
        """Per child: the time budget of runs it may hold queued, at most `depth`."""
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def limit(self) -> int:
        """Runs a child may hold queued now."""
        return self.budget.limit

    def queue_behind(self, ready: Iterable[ChildHandle], now: float) -> ChildHandle | None:
        """The child to queue a run on when every slot is taken: the least loaded one that
        started a run within the window; None when none may take it (or it is off)."""
        if not self.limit:
            return None
        best: ChildHandle | None = None
        limit = self.limit
        for child in ready:
            queued = len(child.queued)
            if queued < limit and self.moving(child, now):
                best, limit = child, queued
        return best

    def moving(self, child: ChildHandle, now: float) -> bool:
        """Whether `child` started a run within the window (so it is not stuck in a long
        one)."""
        return child.last_start >= now - self.window

    def stuck(self, ready: list[ChildHandle], size: int, now: float) -> bool:
        """Every one of the `size` children is up and busy, and none is moving: long jobs
        run in all of them, so a run that waits for one waits for one of those to end."""
        if len(ready) < size:
            return False  # a child is (re)starting: it will take the run
        return all(child.free <= 0 and not self.moving(child, now) for child in ready)

    def timed(self, seconds: float) -> None:
        """Count a run's duration in the moving average that sets the queue depth."""
        if self.depth:
            self.budget.timed(seconds)

    def open_slots(self, ready: Iterable[ChildHandle], now: float) -> int:
        """Runs the pool may hold queued now: `limit` for each child that has a free slot
        or started a run within the window (none for one busy with a long job)."""
        if not self.limit:
            return 0
        return self.limit * sum(
            1 for child in ready if child.running < child.capacity or self.moving(child, now)
        )

    def queued(self, loop: asyncio.AbstractEventLoop, children: Iterable[ChildHandle]) -> None:
        """A run was queued: make sure a sweep over `children` comes (see `sweep`)."""
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.window, self._sweep, loop, children)

    def _sweep(self, loop: asyncio.AbstractEventLoop, children: Iterable[ChildHandle]) -> None:
        """Take queued runs back from children that started nothing for a window (a long
        job runs there), so they go to the first child that is free; again while any child
        holds queued runs."""
        self._sweeper = None
        now = loop.time()
        waiting = False
        for child in children:
            if not child.queued or child.channel is None:
                continue
            if child.state not in ("ready", "retiring"):
                continue
            waiting = True
            if not self.moving(child, now):
                ids = [inv.id for inv in child.queued.values() if not inv.taking]
                for inv_id in ids:
                    child.queued[inv_id].taking = True
                if ids:
                    child.channel.send({"t": TAKE, "ids": ids})
                    # The run there has taken a window already: the queue shrinks now,
                    # not only once that run ends.
                    self.timed(now - child.last_start)
        if waiting:
            self.queued(loop, children)

    def close(self) -> None:
        """Stop sweeping."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
