"""One sandbox child as the parent sees it (`ChildHandle`), and one run sent to it (`Invocation`).

The pool's `ChildSet` (`boot.py`) keeps the sets a child belongs to (all children, the
ready ones) and decides when a child is retired, stopped or killed. What concerns one child
alone lives here: its channel, the runs it has in flight, its capacity and RSS, and the
per-child steps of each decision (ask it to stop, signal it, settle its results, reap it).

Runs sent to a child are either running or queued behind the running ones (pipelining). The
parent's view of which is which follows the child's messages in order: a queued run counts
as started once the parent has read the outcome that freed its slot, as the child starts it
right after writing that outcome. When a child dies, its running runs fail and its queued
ones raise `NotStarted`, for the pool to send them elsewhere.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

from .channel import Channel
from .errors import (
    RemoteTraceback,
    SandboxBootError,
    SandboxClosedError,
    SandboxCrashError,
    SandboxError,
    describe_exit,
)
from .protocol import CANCELLED, STOP, error_from_wire

if TYPE_CHECKING:
    from .launcher import Launcher

__all__ = ["ChildHandle", "ChildState", "Invocation", "NotStarted"]

_MAX_CALLS = 64  # proxied calls one child may have running on the connection
_LOST_EXIT_WAIT = 2.0  # a child whose socket closed gets this long to exit before SIGKILL

Drop = Callable[[list[int]], None]
"""Forgets job handles (`JobProxy.drop`): a finished run's jobs take no more calls."""


class NotStarted(Exception):
    """A run that its child gave back, or held queued when it died: it never started, so
    the pool sends it to another child (the job's attempt is not used)."""


class Invocation:
    """One run (a job, or a batch) sent to a child."""

    __slots__ = (
        "abandoned",
        "child",
        "future",
        "handles",
        "id",
        "job_ids",
        "started",
        "taking",
        "timeout",
        "timer",
    )

    def __init__(
        self, inv_id: int, child: ChildHandle, future: asyncio.Future[Any], handles: list[int]
    ) -> None:
        self.id = inv_id
        self.child = child
        self.future = future
        self.handles = handles
        self.job_ids = ""
        self.timer: asyncio.TimerHandle | None = None
        self.abandoned = False
        self.timeout: float | None = None  # seconds, from when it starts
        self.started: float | None = None  # loop time it started at; None while queued
        self.taking = False  # asked back from the child's queue

    def finish(self, drop: Drop) -> bool:
        """Forget the run's job handles and cancel its timer; whether its caller still
        waits for an outcome."""
        drop(self.handles)
        if self.timer is not None:
            self.timer.cancel()
        return not self.abandoned and not self.future.done()


class ChildState(StrEnum):
    """Where a sandbox child is in its life; `ChildHandle.move` is the only way on."""

    BOOTING = "booting"
    """Started, loading the processor: no run is sent to it yet."""
    READY = "ready"
    """Takes runs."""
    RETIRING = "retiring"
    """Takes no new runs; exits once those it has end (recycling by job count or memory)."""
    DYING = "dying"
    """Told to stop or killed; its exit is awaited."""
    DEAD = "dead"
    """Exited and reaped."""


_MOVES: dict[ChildState, frozenset[ChildState]] = {
    ChildState.BOOTING: frozenset({ChildState.READY, ChildState.DYING, ChildState.DEAD}),
    ChildState.READY: frozenset({ChildState.RETIRING, ChildState.DYING, ChildState.DEAD}),
    ChildState.RETIRING: frozenset({ChildState.DYING, ChildState.DEAD}),
    ChildState.DYING: frozenset({ChildState.DEAD}),
    ChildState.DEAD: frozenset({ChildState.DEAD}),  # reaped twice: nothing changes
}


class ChildHandle:
    """What the pool knows about one child process."""

    __slots__ = (
        "boot",
        "call_slots",
        "calls",
        "capacity",
        "channel",
        "exitcode",
        "inflight",
        "jobs_started",
        "kill_reason",
        "last_start",
        "pid",
        "queued",
        "rss",
        "state",
        "stopping",
        "timers",
    )

    def __init__(self, pid: int, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = pid
        # set when it has loaded the processor (or cannot)
        self.boot: asyncio.Future[None] = loop.create_future()
        self.boot.add_done_callback(_consume)  # its error is also reported when nobody waits
        self.channel: Channel | None = None
        self.state = ChildState.BOOTING
        self.capacity = 1
        self.inflight: dict[int, Invocation] = {}  # sent and not settled: running and queued
        self.queued: dict[int, Invocation] = {}  # the queued ones, in the order sent
        self.last_start = 0.0  # loop time a run last started on it
        self.jobs_started = 0
        self.rss = 0
        self.calls = 0
        self.call_slots = asyncio.Semaphore(_MAX_CALLS)
        self.kill_reason: str | None = None
        self.stopping = False
        self.exitcode: int | None = None
        self.timers: list[asyncio.TimerHandle] = []

    def move(self, to: ChildState) -> None:
        """Go on to state `to`; RuntimeError for a move its life does not have (a bug)."""
        if to not in _MOVES[self.state]:
            raise RuntimeError(f"sandbox child {self.pid}: no move from {self.state} to {to}")
        self.state = to

    @property
    def free(self) -> int:
        """How many more runs it would start at once."""
        return self.capacity - len(self.inflight)

    @property
    def running(self) -> int:
        """How many runs it has started and not finished, as far as the parent knows."""
        return len(self.inflight) - len(self.queued)

    def next_queued(self) -> Invocation | None:
        """The oldest queued run, now started, if a slot is free; else None."""
        if not self.queued or self.running >= self.capacity:
            return None
        return self.queued.pop(next(iter(self.queued)))

    def connect(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_messages: Callable[[ChildHandle, list[dict[str, Any]]], None],
        on_closed: Callable[[ChildHandle, str], None],
    ) -> Channel:
        """Open the child's channel on `sock`: what arrives goes to `on_messages(child,
        messages)`, its closing to `on_closed(child, reason)`."""
        self.channel = Channel(sock, partial(on_messages, self), partial(on_closed, self), loop)
        return self.channel

    # -- messages -----------------------------------------------------------------------------

    def fail_boot(self, wire: Any, target: str) -> None:
        """A `boot_error` message: the child could not load `target`; its boot fails."""
        cause = error_from_wire(wire)
        name = wire.get("name", type(cause).__name__) if isinstance(wire, dict) else "?"
        error = SandboxBootError(f"cannot load processor {target!r}: {name}: {cause}")
        if isinstance(cause.__cause__, RemoteTraceback):
            error.__cause__ = cause.__cause__
        if not self.boot.done():
            self.boot.set_exception(error)

    def settle(self, m: dict[str, Any], ok: bool, drop: Drop) -> bool:
        """A `result` (ok) or `error` message: note the RSS it reports, resolve its run.
        Whether that run was running (so its slot is free now)."""
        inv = self.inflight.pop(m.get("i", -1), None)
        rss = m.get("rss")
        if isinstance(rss, int):
            self.rss = rss
        if inv is None:
            return False
        freed = self.queued.pop(inv.id, None) is None
        if not inv.finish(drop):
            return freed
        if ok:
            inv.future.set_result(m.get("v"))
            return freed
        wire = m.get("err")
        if isinstance(wire, dict) and wire.get("type") == CANCELLED:
            error: BaseException = SandboxError("the run was cancelled in the child")
        else:
            error = error_from_wire(wire)
        inv.future.set_exception(error)
        return freed

    def given_back(self, ids: Any, drop: Drop) -> int:
        """A `back` message: these runs never started; their callers get NotStarted.
        Returns how many were still awaited."""
        count = 0
        for inv_id in ids if isinstance(ids, list) else ():
            inv = self.inflight.pop(inv_id, None)
            if inv is None:
                continue
            self.queued.pop(inv_id, None)
            if inv.finish(drop):
                inv.future.set_exception(NotStarted())
                count += 1
        return count

    # -- stopping -----------------------------------------------------------------------------

    def stop(
        self, loop: asyncio.AbstractEventLoop, wait: float, kill: Callable[[ChildHandle, str], None]
    ) -> None:
        """Ask the child to exit once its runs end; `kill` it if it is still there after
        `wait` seconds."""
        if self.stopping or self.channel is None:
            return
        self.stopping = True
        self.channel.send({"t": STOP})
        self.timers.append(loop.call_later(wait, kill, self, "it did not stop when asked"))

    def terminate(self, launcher: Launcher, loop: asyncio.AbstractEventLoop, grace: float) -> None:
        """SIGTERM the child (and its process group) now, SIGKILL after `grace` seconds."""
        launcher.kill(self.pid, signal.SIGTERM)
        self.timers.append(loop.call_later(grace, launcher.kill, self.pid, signal.SIGKILL))

    def disconnected(
        self, reason: str, launcher: Launcher | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Its socket closed for `reason`: a child that closed it is exiting and gets a
        moment to; a broken socket gets it SIGKILL at once."""
        if "peer closed" not in reason:
            self.kill_reason = f"IPC failure: {reason}"
            if launcher is not None:
                launcher.kill(self.pid, signal.SIGKILL)
        elif launcher is not None:
            self.timers.append(
                loop.call_later(_LOST_EXIT_WAIT, launcher.kill, self.pid, signal.SIGKILL)
            )

    def close_runs(self, drop: Drop) -> None:
        """The pool closes: fail the runs still going with SandboxClosedError; results that
        still come are ignored."""
        for inv in list(self.inflight.values()):
            drop(inv.handles)
            if not inv.future.done():
                inv.future.set_exception(SandboxClosedError("the sandbox pool was closed"))
            inv.abandoned = True

    def reap(self, code: int | None, target: str, drop: Drop) -> str:
        """The child exited with status `code` (None: unknown): mark it dead, cancel its
        timers, close its channel, fail its boot and its runs. Returns why the runs failed."""
        self.move(ChildState.DEAD)
        self.exitcode = code
        for timer in self.timers:
            timer.cancel()
        if self.channel is not None:
            self.channel.close("reaped")
        if not self.boot.done():
            self.boot.set_exception(
                SandboxBootError(f"a sandbox child {describe_exit(code)} while loading {target!r}")
            )
        if self.kill_reason is not None:
            why = f"sandbox child (pid {self.pid}) was killed: {self.kill_reason}"
        else:
            why = f"sandbox child (pid {self.pid}) {describe_exit(code)} while running the job"
        for inv in self.inflight.values():
            if inv.finish(drop):
                if inv.id in self.queued:
                    inv.future.set_exception(NotStarted())
                else:
                    inv.future.set_exception(SandboxCrashError(why, code))
        self.inflight.clear()
        self.queued.clear()
        return why


def _consume(fut: asyncio.Future[Any]) -> None:
    """Retrieve the future's exception, so asyncio does not log it as never retrieved."""
    if not fut.cancelled():
        fut.exception()
