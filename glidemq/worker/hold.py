"""How many jobs a Worker may hold beyond its concurrency (its hold window).

A held job was fetched and activated on the server like any other, but waits in the worker
until one of its `concurrency` slots frees; then it starts at once, with no round trip, while
the finished job's completion (which fetches the next jobs) goes out in the background. So a
worker at low concurrency runs jobs back to back instead of waiting a round trip per job.

How many may be held is a time budget: about `window` seconds of work at the recent run
time (a moving average), never more than `depth`. Short jobs get the whole depth; jobs
longer than the window get none, so they are never kept from other workers. Until a run has
been timed, one job may be held. A held job waits at most about one window: when no job has
started for a window while jobs are held (every slot runs a long job), the held jobs go back
to the queue (`stuck`), and that wait counts as a long run in the average.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..errors import GlideMQError
from ..timing.clock import monotonic
from ..timing.run_budget import RunBudget
from ..wire import fetch

if TYPE_CHECKING:
    from .link import WorkerLink

__all__ = ["MIN_HELD", "HeldJobs", "HoldWindow", "default_max_held", "send_back"]

MIN_HELD = 256
"""Default `max_held` for concurrency below it. The time budget bounds held work; this only
caps the count for jobs shorter than about `hold_window` / 256 per slot. On no-op jobs, 256
against 64 gave 1.23x the jobs/s at concurrency 1, 1.16x at 10, 1.10x at 50."""
_COLD_LIMIT = 0  # jobs held before any run was timed: none, it may be long


def default_max_held(concurrency: int) -> int:
    """`max_held` when the Worker is not told: its concurrency, at least MIN_HELD."""
    return max(MIN_HELD, concurrency)


class HoldWindow:
    """The hold policy of one Worker with `capacity` slots; the `SlotExtension` of its
    `Slots`, which counts held jobs with the running ones."""

    __slots__ = ("budget", "capacity", "depth", "last_start", "window")

    def __init__(self, capacity: int, window: float, depth: int) -> None:
        self.capacity = capacity
        self.window = window
        """Seconds of expected work the worker may hold."""
        self.depth = depth
        """The most jobs held at once."""
        self.budget = RunBudget(window, depth, slots=capacity, cold=_COLD_LIMIT)
        self.last_start = float("-inf")
        """`monotonic()` when a job last started running."""

    @property
    def limit(self) -> int:
        """Jobs that may be held now: the time budget, at most `depth`."""
        return self.budget.limit

    @property
    def accepting(self) -> bool:
        """Always: an in-process worker can take jobs as soon as it is started."""
        return True

    @property
    def pipeline_slots(self) -> int:
        """Slots beyond the concurrency: the jobs that may be held now (none while no job
        started within a window: the slots run long jobs, or the worker was idle)."""
        if not self.limit or self.stuck():
            return 0
        return self.limit

    def started(self) -> None:
        """A job started running now."""
        self.last_start = monotonic()

    def timed(self, seconds: float) -> None:
        """Count a run's duration in the moving average that sets `limit`."""
        self.budget.timed(seconds)

    def stuck(self) -> bool:
        """No job started for a window: held jobs would wait for a long run to end."""
        return monotonic() - self.last_start >= self.window


class HeldJobs:
    """What a Worker does with the jobs it holds (the jobs themselves wait in `link.slots`):
    watch the hold window, and give them all back when the worker pauses, closes or has been
    stuck for a window. Without a hold window (`window` None) the only held jobs are those
    waiting for their lease to be revalidated (glidemq/worker/lease.py). `spawn(call)` runs a
    server call in the background (close waits for it)."""

    def __init__(
        self,
        link: WorkerLink,
        window: HoldWindow | None,
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        self.link = link
        self.window = window
        self.spawn = spawn
        self._check: asyncio.TimerHandle | None = None

    def fetched(self, started: bool) -> None:
        """The jobs of a fetch reply were `started` (some of them) or held: watch the held."""
        window = self.window
        if window is None:
            return
        if started:
            window.started()
        if self.link.slots.held_count and self._check is None:
            self._check = asyncio.get_running_loop().call_later(window.window, self._watch)

    def started(self) -> None:
        """A held job started in a freed slot."""
        if self.window is not None:
            self.window.started()

    def _watch(self) -> None:
        self._check = None
        window = self.window
        if window is None or not self.link.slots.held_count:
            return
        waited = monotonic() - window.last_start
        if not window.stuck() or self.link.slots.suspect_waiting():
            # (a suspect waits for the running jobs to end, to run alone: starts stop on
            # purpose, glidemq/worker/starts.py)
            again = window.window - waited if waited < window.window else window.window
            self._check = asyncio.get_running_loop().call_later(again, self._watch)
            return
        if waited != float("inf"):  # no job started yet: nothing to time (jobs held unrecorded)
            window.timed(waited)  # a long run is going on: hold fewer
        self.spawn(self.give_back())

    async def give_back(self) -> None:
        """Hand every held job back to the queue unrun."""
        if self._check is not None:
            self._check.cancel()
            self._check = None
        taken = self.link.slots.take_held()
        if taken:
            await send_back(self.link, [p for entry_id, job in taken for p in (entry_id, job.id)])


async def send_back(link: WorkerLink, pairs: list[str]) -> None:
    """Return jobs the worker took but never started (entry and job id after each other)."""
    if link.ctx is None or not pairs:
        return
    try:
        await fetch.return_held(link.ctx, link.consumer, pairs)
    except GlideMQError as exc:
        link.events.emit("error", exc)  # left in the PEL: stall recovery takes them
    link.slots.wake()
