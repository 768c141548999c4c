"""Running one plan: the loop, the clock seam and the engine's random numbers set up for it,
the world carried out, the history checked."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..client import functions
from ..timing.clock import use_monotonic
from .behaviour import UserProcessor
from .checker import check
from .facts import Violation
from .history import History
from .loop import Deadlock, current_process
from .plan import Plan, make_plan
from .world import World, quiet_logs

__all__ = ["Result", "run_plan", "run_seed"]


@dataclass
class Result:
    """The outcome of one seed (or a shrunk plan of it)."""

    plan: Plan
    history: History
    violations: list[Violation] = field(default_factory=list)
    virtual_s: float = 0.0
    jobs: int = 0
    """Jobs of the plan."""
    acked: int = 0
    """Of them, the adds the producer saw acknowledged (a fault may fail an add)."""
    faults: int = 0

    @property
    def seed(self) -> int:
        return self.plan.seed

    @property
    def failures(self) -> list[Violation]:
        """The violations that are not known defects (glidemq.sim.known)."""
        return [v for v in self.violations if not v.known]

    @property
    def ok(self) -> bool:
        return not self.failures

    def digest(self) -> str:
        return self.history.digest()


def _ignore(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """Errors nobody awaited (tasks of killed processes, mostly): the history has what matters."""


async def _teardown() -> int:
    """End every task left (those of frozen and killed processes too) without running it:
    closing a coroutine runs its `finally` blocks now, on the loop, instead of at some later
    garbage collection with no loop. Returns how many were closed."""
    me = asyncio.current_task()
    closed = 0
    for task in asyncio.all_tasks():
        if task is not me:
            closed += 1
            with contextlib.suppress(BaseException):  # the run is over: nothing to report
                task.get_coro().close()
    return closed


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Close what the run left behind quietly, then the loop."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # coroutines that never started
            for _ in range(5):
                if not loop.run_until_complete(_teardown()):
                    break
            gc.collect()
    finally:
        sys.unraisablehook = hook
        loop.close()


class _PerProcess(dict[object, asyncio.Lock]):
    """Per-event-loop state of the engine (the library loading lock) is per-process state:
    one loop runs every simulated process, so each gets its own, and a killed process that
    held one does not hold it for the others."""

    def _key(self, loop: object) -> object:
        return (loop, current_process())

    def get(self, loop: object, default: asyncio.Lock | None = None) -> asyncio.Lock | None:  # type: ignore[override]
        return super().get(self._key(loop), default)

    def __setitem__(self, loop: object, lock: asyncio.Lock) -> None:
        super().__setitem__(self._key(loop), lock)


@contextlib.contextmanager
def _process_local() -> Iterator[None]:
    saved = functions._load_locks  # noqa: SLF001 - see _PerProcess
    functions._load_locks = _PerProcess()  # type: ignore[assignment]  # noqa: SLF001
    try:
        yield
    finally:
        functions._load_locks = saved  # noqa: SLF001


def run_plan(plan: Plan, app: UserProcessor | None = None) -> Result:
    """Carry out `plan` in a fresh world and check its history."""
    world = World(plan, app)
    loop = world.loop
    loop.set_exception_handler(_ignore)
    state = random.getstate()
    random.seed(f"glidemq-sim:{plan.seed}:engine")  # backoff and retry jitter
    use_monotonic(loop.time)
    levels = quiet_logs()
    try:
        try:
            with _process_local():
                loop.run_until_complete(world.main())
        except Deadlock as exc:
            world.record("deadlock", "sim", error=str(exc))
        world.history.recording = False
        violations = check(world)
    finally:
        try:
            _finish(loop)
        finally:
            use_monotonic(None)
            random.setstate(state)
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            asyncio.set_event_loop(None)
    return Result(
        plan,
        world.history,
        violations,
        virtual_s=world.finished_at - world.t0,
        jobs=len(plan.jobs),
        acked=len(world.jobs),
        faults=len(plan.faults),
    )


def run_seed(seed: int, faults: str = "all", app: UserProcessor | None = None) -> Result:
    """Run the plan of `seed`."""
    return run_plan(make_plan(seed, faults), app)
