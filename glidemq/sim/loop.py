"""The simulator's event loop: asyncio's, with a virtual clock and processes.

`SimLoop.time()` is virtual: it never reads a real clock, and when nothing is ready to run
the loop jumps straight to the next timer instead of waiting in a selector; each iteration
itself takes a microsecond (`TICK`). So a seed that
covers minutes of lock durations and backoffs takes milliseconds of real time, and the
order in which callbacks run depends only on what the code scheduled.

A `Process` is a name for everything one simulated program runs: the tasks and callbacks
scheduled from inside it carry it in their context (`current_process`). A frozen process's
callbacks are kept aside and run, in order, when it thaws (SIGSTOP then SIGCONT: its timers
that came due meanwhile fire at once, and replies that arrived meanwhile are read then); a
killed process's callbacks are dropped, so none of its code runs again, no `finally` and no
cleanup call (SIGKILL).

There is no I/O: no sockets and no threads. `run_in_executor` (and so `asyncio.to_thread`)
runs the function on the loop at once, so a sync processor runs in virtual time zero.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import heapq
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

__all__ = ["Deadlock", "Process", "ProcessState", "SimLoop", "current_process"]

T = TypeVar("T")

_PROCESS: contextvars.ContextVar[Process | None] = contextvars.ContextVar(
    "glidemq_sim_process", default=None
)
_MIN_CANCELLED = 100  # cancelled timers kept in the heap before it is rebuilt
TICK = 1e-6
"""Virtual seconds one loop iteration takes: code is never free, so a timer set for 'a
hair later' is later, as on a real clock."""


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is set: every task waits for something that never comes."""


class ProcessState(enum.Enum):
    RUNNING = "running"
    FROZEN = "frozen"
    DEAD = "dead"


class Process:
    """One simulated program: its callbacks run only while it is RUNNING."""

    __slots__ = ("context", "name", "parked", "state", "tasks")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = ProcessState.RUNNING
        self.parked: list[asyncio.Handle] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.context = contextvars.copy_context()
        self.context.run(_PROCESS.set, self)

    @property
    def alive(self) -> bool:
        return self.state is not ProcessState.DEAD

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Start `coro` as a task of this process (its own tasks inherit the process)."""
        task = asyncio.get_running_loop().create_task(coro, name=name, context=self.context.copy())
        self.tasks.append(task)
        return task

    def __repr__(self) -> str:
        return f"<Process {self.name} {self.state.value}>"


def current_process() -> Process | None:
    """The process the running code belongs to (None: the simulator itself, or the server)."""
    return _PROCESS.get()


class SimLoop(asyncio.BaseEventLoop):
    """An asyncio event loop on virtual time, with processes that can freeze and die."""

    def __init__(self, start: float = 1_000.0) -> None:
        super().__init__()
        self._now = float(start)
        self.iterations = 0
        self.on_idle: Callable[[], bool] | None = None
        """Called when nothing is ready and no timer is set; True if it scheduled something."""

    # -- time -------------------------------------------------------------------------------

    def time(self) -> float:
        return self._now

    # -- processes ----------------------------------------------------------------------------

    def freeze(self, process: Process) -> None:
        """Stop running `process`'s callbacks; they wait until `thaw`."""
        if process.state is ProcessState.RUNNING:
            process.state = ProcessState.FROZEN

    def thaw(self, process: Process) -> None:
        """Run `process` again, starting with what it missed while frozen, in order."""
        if process.state is not ProcessState.FROZEN:
            return
        process.state = ProcessState.RUNNING
        parked, process.parked = process.parked, []
        self._ready.extend(parked)  # type: ignore[attr-defined]

    def kill(self, process: Process) -> None:
        """`process` runs no code ever again (its pending tasks are simply never resumed)."""
        process.state = ProcessState.DEAD
        process.parked.clear()

    # -- no I/O -------------------------------------------------------------------------------

    def _process_events(self, event_list: Any) -> None:
        return None

    def _write_to_self(self) -> None:
        return None

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Run `func(*args)` on the loop now (no threads in the simulator)."""
        fut: asyncio.Future[T] = self.create_future()
        try:
            fut.set_result(func(*args))
        except BaseException as exc:
            fut.set_exception(exc)
        return fut

    # -- one iteration ------------------------------------------------------------------------

    def _run_once(self) -> None:
        # asyncio's own iteration, on virtual time, with processes: it reads the fields
        # asyncio's handles keep for their loop (SLF001), as BaseEventLoop._run_once does.
        ready: Any = self._ready  # type: ignore[attr-defined]
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        self.iterations += 1
        cancelled = self._timer_cancelled_count  # type: ignore[has-type]
        if cancelled > _MIN_CANCELLED and cancelled * 2 > len(scheduled):
            kept = []
            for handle in scheduled:
                if handle.cancelled():
                    handle._scheduled = False  # type: ignore[attr-defined]  # noqa: SLF001
                else:
                    kept.append(handle)
            heapq.heapify(kept)
            scheduled[:] = kept
            self._timer_cancelled_count = 0
        while scheduled and scheduled[0].cancelled():
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False  # type: ignore[attr-defined]  # noqa: SLF001
        if not ready and not self._stopping:  # type: ignore[attr-defined]
            if not scheduled:
                if self.on_idle is not None and self.on_idle():
                    return
                raise Deadlock("no task can make progress: nothing is ready and no timer is set")
            when = scheduled[0].when()
            if when > self._now:
                self._now = when  # the jump: nothing happens in between
        self._now += TICK
        now = self._now
        while scheduled and scheduled[0].when() <= now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False  # type: ignore[attr-defined]  # noqa: SLF001
            ready.append(handle)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle.cancelled():
                continue
            process = handle._context.get(_PROCESS)  # noqa: SLF001
            if process is not None and process.state is not ProcessState.RUNNING:
                if process.state is ProcessState.FROZEN:
                    process.parked.append(handle)
                continue
            handle._run()  # noqa: SLF001
