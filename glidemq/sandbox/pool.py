"""The parent side of the sandbox: a pool of child processes that run a processor.

The pool lives in a worker process, on its event loop, next to the Worker that owns the
Valkey connection. `run(job)` sends the job to a child and returns what the processor
returned there (or raises what it raised); the Worker treats it as any processor. The pool
keeps `max_children` children warm, replaces the ones that die, recycles the ones that reach
a limit, kills the ones that time out or ignore an abort, and backs off while the processor
cannot be loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import orjson

from ..errors import JobStateError, JobTimeoutError, ValidationError
from ..job import Job
from .errors import (
    RemoteTraceback,
    SandboxBootError,
    SandboxClosedError,
    SandboxCrashError,
    SandboxError,
    describe_exit,
)
from .job import PROXIED_METHODS, job_fields, job_to_wire
from .protocol import (
    ABORT,
    BOOT_ERROR,
    CALL,
    CANCELLED,
    ERROR,
    HEARTBEAT,
    HELLO,
    PROTOCOL_VERSION,
    READY,
    REPLY,
    RESULT,
    RUN,
    STOP,
    Channel,
    HelloMessage,
    ProtocolError,
    error_from_wire,
    error_to_wire,
)
from .types import SandboxOptions, normalize_target

__all__ = ["SandboxPool"]

log = logging.getLogger("glidemq.sandbox")

# `python -c` bootstrap of the fork server and of spawned children: take the parent's
# sys.path (last argument) before importing anything, so whatever the parent can import,
# the child can too.
_BOOT = (
    "import sys, json; p = json.loads(sys.argv[-1]); "
    "sys.path[:] = p + [x for x in sys.path if x not in p]; "
    "from glidemq.sandbox.runner import {entry}; {entry}(sys.argv[1:])"
)
_MAX_CALLS_PER_CHILD = 64  # proxied calls one child may have running on the connection
_PAUSE_CALLS_AT = 1024  # stop reading a child that queues more calls than this
_LOST_EXIT_WAIT = 2.0  # a child whose socket closed gets this long to exit before SIGKILL


def _watch_exit(
    loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes], done: Callable[[], None]
) -> Callable[[], None]:
    """Call `done()` once `proc` has exited and been reaped (pidfd when available).
    Returns a function that stops watching."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = -1
    watching = True

    def stop() -> None:
        nonlocal watching
        if watching:
            watching = False
            if pidfd >= 0:
                loop.remove_reader(pidfd)
                os.close(pidfd)

    def exited() -> None:
        stop()
        proc.wait()
        done()

    if pidfd >= 0:
        loop.add_reader(pidfd, exited)
        return stop

    async def poll() -> None:  # pragma: no cover - kernels before 5.3
        # Nothing to wait on without a pidfd (SIGCHLD belongs to the application): poll.
        while watching and proc.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if watching:
            exited()

    loop.create_task(poll())
    return stop


async def _wait_reaped(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for `proc` to exit, SIGKILL it after `timeout`, and reap it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while proc.poll() is None:
        if asyncio.get_running_loop().time() >= deadline:
            with contextlib.suppress(OSError):
                proc.kill()
            await asyncio.to_thread(proc.wait)
            return
        await asyncio.sleep(0.01)


class _Launcher(Protocol):
    async def start(self) -> None: ...

    async def launch(self) -> tuple[int, socket.socket]: ...

    def kill(self, pid: int, sig: int) -> None: ...

    async def close(self) -> None: ...

    @property
    def pid(self) -> int | None: ...


class _ForkServer:
    """Starts one fork server (exec of a clean interpreter) and asks it for children."""

    def __init__(
        self,
        config: dict[str, Any],
        on_exit: Callable[[int, int | None], None],
        on_lost: Callable[[str], None],
        timeout: float,
    ) -> None:
        self._config = config
        self._on_exit = on_exit
        self._on_lost = on_lost
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._ready: asyncio.Future[None] | None = None
        self._forks: dict[int, asyncio.Future[tuple[int, socket.socket]]] = {}
        self._next = 0
        self._alive = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unwatch: Callable[[], None] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # On the loop's thread on purpose: PR_SET_PDEATHSIG follows the thread that
            # forked, so a helper thread's exit would kill the server. fork+exec is quick.
            self._proc = subprocess.Popen(  # noqa: ASYNC220
                [
                    sys.executable,
                    "-c",
                    _BOOT.format(entry="forkserver_main"),
                    str(theirs.fileno()),
                    str(os.getpid()),
                    orjson.dumps(self._config).decode(),
                    orjson.dumps(sys.path).decode(),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        mine.setblocking(False)
        self._ctrl = mine
        self._alive = True
        self._ready = loop.create_future()
        loop.add_reader(mine.fileno(), self._readable)
        proc = self._proc
        self._unwatch = _watch_exit(
            loop, proc, lambda: self._lost(f"it {describe_exit(proc.returncode)}")
        )
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self._timeout)
        except TimeoutError:
            await self.close()
            raise SandboxBootError(
                f"the sandbox fork server did not start within {self._timeout:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def launch(self) -> tuple[int, socket.socket]:
        if not self._alive or self._ctrl is None or self._loop is None:
            raise SandboxError("the sandbox fork server is not running")
        self._next += 1
        n = self._next
        fut: asyncio.Future[tuple[int, socket.socket]] = self._loop.create_future()
        self._forks[n] = fut
        try:
            self._ctrl.send(orjson.dumps({"t": "fork", "n": n}))
            return await asyncio.wait_for(asyncio.shield(fut), self._timeout)
        except TimeoutError:
            raise SandboxError("the sandbox fork server did not answer a fork request") from None
        except OSError as exc:
            raise SandboxError(f"cannot reach the sandbox fork server: {exc}") from None
        finally:
            self._forks.pop(n, None)
            if not fut.done():
                fut.cancel()  # a late answer finds no future and kills the child

    def kill(self, pid: int, sig: int) -> None:
        # Through the server: it knows whether `pid` is still its unreaped child.
        if self._alive and self._ctrl is not None:
            try:
                self._ctrl.send(orjson.dumps({"t": "kill", "pid": pid, "sig": sig}))
                return
            except OSError:
                pass
        # Server gone: its children got SIGKILL from PR_SET_PDEATHSIG already.

    def _readable(self) -> None:
        while self._ctrl is not None:
            try:
                data, fds, _, _ = socket.recv_fds(self._ctrl, 65536, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                self._lost("it closed its control socket")
                return
            try:
                msg = orjson.loads(data)
            except orjson.JSONDecodeError:
                msg = {}
            kind = msg.get("t")
            if kind == "forked":
                fut = self._forks.get(msg.get("n", -1))
                if "error" in msg or not fds:
                    for fd in fds:
                        os.close(fd)
                    if fut is not None and not fut.done():
                        fut.set_exception(SandboxError(f"fork failed: {msg.get('error')}"))
                    continue
                sock = socket.socket(fileno=fds[0])
                for fd in fds[1:]:
                    os.close(fd)
                if fut is not None and not fut.done():
                    fut.set_result((int(msg["pid"]), sock))
                else:  # nobody waits any more (closing): do not leave the child behind
                    sock.close()
                    self.kill(int(msg["pid"]), signal.SIGKILL)
                continue
            for fd in fds:
                os.close(fd)
            if kind == "exit":
                self._on_exit(int(msg["pid"]), msg.get("code"))
            elif kind == "ready" and self._ready is not None and not self._ready.done():
                self._ready.set_result(None)

    def _lost(self, why: str) -> None:
        if not self._alive:
            return
        self._alive = False
        self._detach()
        error = SandboxError(f"the sandbox fork server is gone: {why}")
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)
        for fut in self._forks.values():
            if not fut.done():
                fut.set_exception(error)
        self._on_lost(why)

    def _detach(self) -> None:
        if self._ctrl is not None and self._loop is not None:
            self._loop.remove_reader(self._ctrl.fileno())
            self._ctrl.close()
            self._ctrl = None

    async def close(self) -> None:
        self._alive = False
        # EOF on its control socket makes the server kill its children and exit.
        self._detach()
        if self._unwatch is not None:
            self._unwatch()
        if self._proc is not None:
            await _wait_reaped(self._proc, 3.0)


class _Spawner:
    """Starts every child as a fresh interpreter (fork+exec, its own process group)."""

    def __init__(self, on_exit: Callable[[int, int | None], None]) -> None:
        self._on_exit = on_exit
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._unwatch: dict[int, Callable[[], None]] = {}

    @property
    def pid(self) -> int | None:
        return None

    async def start(self) -> None:
        return None

    async def launch(self) -> tuple[int, socket.socket]:
        loop = asyncio.get_running_loop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(  # noqa: ASYNC220 - on the loop thread, see _ForkServer
                [
                    sys.executable,
                    "-c",
                    _BOOT.format(entry="spawn_main"),
                    str(theirs.fileno()),
                    str(os.getpid()),
                    orjson.dumps(sys.path).decode(),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._procs[proc.pid] = proc

        def exited() -> None:
            self._procs.pop(proc.pid, None)
            self._unwatch.pop(proc.pid, None)
            self._on_exit(proc.pid, proc.returncode)

        self._unwatch[proc.pid] = _watch_exit(loop, proc, exited)
        return proc.pid, mine

    def kill(self, pid: int, sig: int) -> None:
        proc = self._procs.get(pid)
        if proc is None or proc.returncode is not None:
            return  # reaped: the pid may belong to someone else now
        try:
            os.killpg(pid, sig)
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    async def close(self) -> None:
        for pid in list(self._procs):
            self.kill(pid, signal.SIGKILL)
        for stop in self._unwatch.values():
            stop()
        self._unwatch.clear()
        for proc in list(self._procs.values()):
            await _wait_reaped(proc, 3.0)
        self._procs.clear()


class _Inv:
    """One run (a job, or a batch) sent to a child."""

    __slots__ = ("abandoned", "child", "future", "handles", "id", "job_ids", "timer")

    def __init__(
        self, inv_id: int, child: _Child, future: asyncio.Future[Any], handles: list[int]
    ) -> None:
        self.id = inv_id
        self.child = child
        self.future = future
        self.handles = handles
        self.job_ids = ""
        self.timer: asyncio.TimerHandle | None = None
        self.abandoned = False


class _Child:
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
        "pid",
        "rss",
        "state",
        "stopping",
        "timers",
    )

    def __init__(self, pid: int, boot: asyncio.Future[None]) -> None:
        self.pid = pid
        self.boot = boot
        self.channel: Channel | None = None
        # booting -> ready -> (retiring | dying) -> dead
        self.state = "booting"
        self.capacity = 1
        self.inflight: dict[int, _Inv] = {}
        self.jobs_started = 0
        self.rss = 0
        self.calls = 0
        self.call_slots = asyncio.Semaphore(_MAX_CALLS_PER_CHILD)
        self.kill_reason: str | None = None
        self.stopping = False
        self.exitcode: int | None = None
        self.timers: list[asyncio.TimerHandle] = []


class SandboxPool:
    """Runs a processor, given as a `module:attr` or file target, in child processes.

    Built by `Worker(..., sandbox=SandboxOptions(...))`, which passes `run` (or `run_batch`)
    as its processor and starts and closes the pool with itself. `slots` is how many runs
    the Worker may have at once (its concurrency); `on_error` is told about children that
    cannot start.
    """

    def __init__(
        self,
        target: str,
        options: SandboxOptions,
        *,
        slots: int,
        batch: bool = False,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.target = normalize_target(target)
        self.options = options
        self.batch = batch
        self._slots = slots
        self._async: bool | None = None  # learnt from the first child that starts
        self._on_error = on_error
        self._state = "new"
        self._last_error: SandboxBootError | None = None
        self._launcher: _Launcher | None = None
        self._children: dict[int, _Child] = {}
        self._early_exits: dict[int, int | None] = {}  # exits seen before the child was known
        self._ready: list[_Child] = []
        self._booting = 0
        self._boot_tasks: set[asyncio.Task[None]] = set()
        self._boot_failures = 0
        self._next_boot_at = 0.0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._jobs: dict[int, Job[Any, Any]] = {}
        self._next_inv = 0
        self._next_handle = 0
        self._changed: asyncio.Event | None = None
        self._empty: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None
        self._maintainer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rss_limit = (
            options.max_memory_per_child_mb << 20 if options.max_memory_per_child_mb else None
        )
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "started",
                "boot_failures",
                "crashed",
                "killed",
                "timeouts",
                "aborted",
                "recycled_jobs",
                "recycled_memory",
                "runs",
            ),
            0,
        )

    # -- state ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """How many children the pool keeps: `max_children`, by default the Worker's
        concurrency (one job per child, as a sync processor needs anyway)."""
        return self.options.max_children or self._slots

    @property
    def is_async(self) -> bool | None:
        """Whether the processor is a coroutine function (None until a child has loaded it)."""
        return self._async

    @property
    def state(self) -> str:
        """new, starting, ready, error (no child can start; see `last_error`), closing,
        closed."""
        return self._state

    @property
    def last_error(self) -> SandboxBootError | None:
        """Why the last child that failed to start failed (None if none has)."""
        return self._last_error

    @property
    def pids(self) -> list[int]:
        """Pids of the live children."""
        return list(self._children)

    @property
    def forkserver_pid(self) -> int | None:
        """Pid of the fork server (None with start_method='spawn')."""
        return self._launcher.pid if self._launcher is not None else None

    def stats(self) -> dict[str, Any]:
        """Counters and the current shape of the pool."""
        return {
            **self.counters,
            "state": self._state,
            "children": len(self._children),
            "ready": len(self._ready),
            "busy": sum(len(c.inflight) for c in self._children.values()),
            "last_error": str(self._last_error) if self._last_error else None,
        }

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the children in the background; returns at once. Runs wait for a child."""
        if self._state != "new":
            return
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._empty = asyncio.Event()
        self._closed = asyncio.Event()
        self._state = "starting"
        self._maintainer = self._loop.create_task(self._maintain(), name="glidemq-sandbox")

    async def close(self) -> None:
        """Stop every child (runs still going are aborted, then killed), stop the fork
        server, reap everything. Idempotent."""
        if self._state == "new":
            self._state = "closed"
            return
        if self._state in ("closing", "closed"):
            if self._closed is not None:
                await self._closed.wait()
            return
        assert self._closed is not None and self._empty is not None
        self._state = "closing"
        try:
            await self._close()
        finally:
            self._state = "closed"
            self._closed.set()

    async def _close(self) -> None:
        assert self._empty is not None
        tasks = [t for t in (self._maintainer, *self._boot_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._wake(len(self._waiters))
        for child in list(self._children.values()):
            for inv in list(child.inflight.values()):
                self._drop_handles(inv)
                if not inv.future.done():
                    inv.future.set_exception(SandboxClosedError("the sandbox pool was closed"))
                inv.abandoned = True
            if child.state in ("ready", "retiring", "booting"):
                self._stop_child(child)
        grace = max(self.options.abort_grace, 0.2)
        if self._children:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._empty.wait(), grace)
        for child in list(self._children.values()):
            self._kill(child, "the sandbox pool closed")
        if self._children:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._empty.wait(), self.options.kill_grace + 2.0)
        if self._launcher is not None:
            await self._launcher.close()
        for child in list(self._children.values()):
            self._reap(child, None)  # status never came (server gone): nothing is left

    # -- running ------------------------------------------------------------------------------

    async def run(self, job: Job[Any, Any]) -> Any:
        """Run the processor on `job` in a child; returns its result or raises its error.

        The job's timeout (or `SandboxOptions.timeout`) is enforced here: when it passes,
        the child is killed and this raises JobTimeoutError('timeout'). Cancelling the
        caller (revoke, lost lock, close) aborts the run in the child.
        """
        child = self._pick() or await self._acquire()
        inv = self._submit(child, [job], batch=False)
        timeout = job.opts.get("timeout") or self.options.timeout
        if timeout:
            assert self._loop is not None
            inv.timer = self._loop.call_later(timeout / 1000, self._on_timeout, inv)
        return await self._wait(inv)

    async def run_batch(self, jobs: Sequence[Job[Any, Any]]) -> Any:
        """Run a batch processor on `jobs` in one child, in one round trip; returns its list
        of results (an item may be an exception) or raises its error."""
        child = self._pick() or await self._acquire()
        inv = self._submit(child, list(jobs), batch=True)
        if self.options.timeout:
            assert self._loop is not None
            inv.timer = self._loop.call_later(self.options.timeout / 1000, self._on_timeout, inv)
        return await self._wait(inv)

    def _pick(self) -> _Child | None:
        best: _Child | None = None
        best_free = 0
        for child in self._ready:
            free = child.capacity - len(child.inflight)
            if free > best_free:
                best, best_free = child, free
        return best

    async def _acquire(self) -> _Child:
        assert self._loop is not None
        while True:
            child = self._pick()
            if child is not None:
                return child
            if self._state in ("closing", "closed"):
                raise SandboxClosedError("the sandbox pool is closed")
            if self._state == "new":
                raise SandboxError("the sandbox pool is not started")
            if self._state == "error":
                raise self._boot_error()
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(fut)
            await fut

    def _wake(self, n: int) -> None:
        while n > 0 and self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                n -= 1

    def _submit(self, child: _Child, jobs: list[Job[Any, Any]], batch: bool) -> _Inv:
        assert self._loop is not None and child.channel is not None
        handles = []
        entries = []
        for job in jobs:
            self._next_handle += 1
            handles.append(self._next_handle)
            entries.append(job_to_wire(job, self._next_handle))
            self._jobs[self._next_handle] = job
        self._next_inv += 1
        inv = _Inv(self._next_inv, child, self._loop.create_future(), handles)
        inv.job_ids = jobs[0].id if len(jobs) == 1 else ",".join(j.id for j in jobs)
        try:
            payload = orjson.Fragment(orjson.dumps(entries))
        except TypeError as exc:  # fields come from JSON, but a caller may build Jobs by hand
            self._drop_handles(inv)
            raise ValidationError("data", f"not JSON-serializable: {exc}") from None
        child.inflight[inv.id] = inv
        child.jobs_started += len(jobs)
        self.counters["runs"] += 1
        child.channel.send({"t": RUN, "i": inv.id, "jobs": payload, "batch": batch})
        limit = self.options.max_jobs_per_child
        if limit is not None and child.jobs_started >= limit:
            self._retire(child, "recycled_jobs")
        return inv

    async def _wait(self, inv: _Inv) -> Any:
        try:
            return await inv.future
        except asyncio.CancelledError:
            if inv.future.cancelled():  # the caller was cancelled: abort the run
                self._abandon(inv)
            raise
        finally:
            if inv.timer is not None and not inv.abandoned:
                inv.timer.cancel()

    def _abandon(self, inv: _Inv) -> None:
        child = inv.child
        if inv.id not in child.inflight:
            return
        inv.abandoned = True
        self._drop_handles(inv)
        if inv.timer is not None:
            inv.timer.cancel()
        if child.state in ("dying", "dead") or child.channel is None:
            return
        self.counters["aborted"] += 1
        child.channel.send({"t": ABORT, "i": inv.id})
        assert self._loop is not None
        inv.timer = self._loop.call_later(self.options.abort_grace, self._abort_expired, inv)

    def _abort_expired(self, inv: _Inv) -> None:
        if inv.id in inv.child.inflight:
            self._kill(
                inv.child,
                f"job {inv.job_ids} did not stop within {self.options.abort_grace:g} s "
                "of being aborted",
            )

    def _on_timeout(self, inv: _Inv) -> None:
        child = inv.child
        if inv.future.done() or child.inflight.pop(inv.id, None) is None:
            return
        self._drop_handles(inv)
        self.counters["timeouts"] += 1
        inv.future.set_exception(JobTimeoutError("timeout"))
        self._kill(child, f"job {inv.job_ids} on it timed out")

    def _drop_handles(self, inv: _Inv) -> None:
        for handle in inv.handles:
            self._jobs.pop(handle, None)

    # -- children -----------------------------------------------------------------------------

    async def _maintain(self) -> None:
        """Keep `size` children starting or ready; one probe at a time, with backoff, while
        children fail to start."""
        assert self._changed is not None and self._loop is not None
        while True:
            self._changed.clear()
            if self._launcher is None:
                try:
                    await self._start_launcher()
                except Exception as exc:
                    error = exc if isinstance(exc, SandboxBootError) else SandboxBootError(str(exc))
                    self._boot_failed(error)
                    await asyncio.sleep(max(0.0, self._next_boot_at - self._loop.time()))
                    continue
            # every booting child belongs to one of the `_booting` tasks
            active = self._booting + len(self._ready)
            want = self.size - active
            if self._boot_failures:
                want = min(want, 1 - self._booting)  # probing: one child at a time
            if want > 0:
                delay = self._next_boot_at - self._loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                for _ in range(want):
                    self._booting += 1
                    task = self._loop.create_task(self._boot_child())
                    self._boot_tasks.add(task)
                    task.add_done_callback(self._boot_tasks.discard)
            await self._changed.wait()

    async def _start_launcher(self) -> None:
        opts = self.options
        launcher: _Launcher
        if opts.start_method == "spawn":
            launcher = _Spawner(self._on_exit)
        else:
            config = {"preload": opts.preload, "target": self.target}
            launcher = _ForkServer(config, self._on_exit, self._on_launcher_lost, opts.boot_timeout)
        await launcher.start()
        self._launcher = launcher

    def _hello(self) -> HelloMessage:
        return {
            "t": HELLO,
            "v": PROTOCOL_VERSION,
            "target": self.target,
            "batch": self.batch,
            "hb": self.options.heartbeat_interval,
            "rss_limit": self._rss_limit,
            "hard_limit": self.options.hard_limit_bytes,
            "sys_path": sys.path,
        }

    async def _boot_child(self) -> None:
        assert self._loop is not None and self._changed is not None
        child: _Child | None = None
        try:
            if self._launcher is None:
                return
            pid, sock = await self._launcher.launch()
            boot: asyncio.Future[None] = self._loop.create_future()
            boot.add_done_callback(_consume)  # its error is also reported when nobody waits
            child = _Child(pid, boot)
            self._children[pid] = child
            assert self._empty is not None
            self._empty.clear()
            self.counters["started"] += 1
            child.channel = Channel(
                sock, partial(self._on_messages, child), partial(self._on_closed, child), self._loop
            )
            child.channel.send(self._hello())
            if pid in self._early_exits:
                self._reap(child, self._early_exits.pop(pid))
            try:
                await asyncio.wait_for(asyncio.shield(child.boot), self.options.boot_timeout)
            except TimeoutError:
                raise SandboxBootError(
                    f"a sandbox child did not load {self.target!r} within "
                    f"{self.options.boot_timeout:g} s"
                ) from None
        except asyncio.CancelledError:
            if child is not None:
                self._kill(child, "the sandbox pool closed")
            raise
        except Exception as exc:
            if child is not None:
                self._kill(child, "it failed to start")
            error = exc if isinstance(exc, SandboxBootError) else SandboxBootError(str(exc))
            self._boot_failed(error)
            return
        finally:
            self._booting -= 1
            if not self._booting:
                self._early_exits.clear()
            self._changed.set()
        if child.state != "booting":  # died in the meantime
            return
        child.state = "ready"
        self._ready.append(child)
        self._boot_failures = 0
        self._next_boot_at = 0.0
        if self._state in ("starting", "error"):
            self._state = "ready"
        self._wake(child.capacity)

    def _boot_failed(self, error: SandboxBootError) -> None:
        assert self._loop is not None
        now = self._loop.time()
        self.counters["boot_failures"] += 1
        self._last_error = error
        if self._next_boot_at <= now:  # children failing together count as one round
            self._boot_failures += 1
            backoff = min(self.options.max_boot_backoff, 0.25 * 2 ** (self._boot_failures - 1))
            self._next_boot_at = now + backoff
        if self._state in ("closing", "closed"):
            return
        log.error(
            "glidemq sandbox: cannot start a child for %s (retrying in %.1f s): %s",
            self.target,
            max(0.0, self._next_boot_at - now),
            error,
        )
        if not self._ready:
            self._state = "error"
            self._wake(len(self._waiters))  # they raise the boot error
        if self._on_error is not None:
            self._on_error(error)

    def _boot_error(self) -> SandboxBootError:
        """A fresh copy of the last boot error (one exception object per failed job)."""
        last = self._last_error
        error = SandboxBootError(str(last) if last else "no sandbox child could start")
        if last is not None and last.__cause__ is not None:
            error.__cause__ = last.__cause__
        return error

    def _retire(self, child: _Child, reason: str) -> None:
        """No new runs for `child`; it stops once its runs finish, and a new one starts."""
        if child.state != "ready":
            return
        child.state = "retiring"
        self._ready.remove(child)
        self.counters[reason] += 1
        assert self._changed is not None
        self._changed.set()
        if not child.inflight:
            self._stop_child(child)

    def _stop_child(self, child: _Child) -> None:
        if child.stopping or child.channel is None:
            return
        child.stopping = True
        child.channel.send({"t": STOP})
        assert self._loop is not None
        wait = self.options.abort_grace + 1.0
        child.timers.append(
            self._loop.call_later(wait, self._kill, child, "it did not stop when asked")
        )

    def _kill(self, child: _Child, reason: str) -> None:
        """SIGTERM the child (and its process group), SIGKILL after kill_grace."""
        if child.state == "dead" or self._launcher is None:
            return
        if child.kill_reason is None:
            child.kill_reason = reason
        if child.state == "dying":
            return
        if child in self._ready:
            self._ready.remove(child)
        child.state = "dying"
        self.counters["killed"] += 1
        assert self._loop is not None and self._changed is not None
        self._changed.set()
        launcher = self._launcher
        launcher.kill(child.pid, signal.SIGTERM)
        child.timers.append(
            self._loop.call_later(self.options.kill_grace, launcher.kill, child.pid, signal.SIGKILL)
        )

    def _on_exit(self, pid: int, code: int | None) -> None:
        child = self._children.get(pid)
        if child is None:
            if self._booting:  # a child that died before _boot_child registered it
                self._early_exits[pid] = code
            return
        if child.channel is not None and not child.channel.closed:
            child.channel.drain_input()  # results it wrote before dying still count
        self._reap(child, code)

    def _on_launcher_lost(self, why: str) -> None:
        if self._state in ("closing", "closed"):
            return
        log.error("glidemq sandbox: the fork server died (%s); restarting it", why)
        for child in list(self._children.values()):
            if child.kill_reason is None:
                child.kill_reason = f"the sandbox fork server died ({why})"
            self._reap(child, None)
        launcher, self._launcher = self._launcher, None
        if launcher is not None and self._loop is not None:
            self._loop.create_task(launcher.close())
        assert self._changed is not None
        self._changed.set()

    def _on_closed(self, child: _Child, reason: str) -> None:
        """The child's socket closed: it is exiting (the exit status follows) or broken."""
        if child.state == "dead":
            return
        if child in self._ready:
            self._ready.remove(child)
        if child.state in ("booting", "ready", "retiring"):
            child.state = "dying"
            assert self._changed is not None and self._loop is not None
            self._changed.set()
            launcher = self._launcher
            if "peer closed" not in reason:
                child.kill_reason = f"IPC failure: {reason}"
                if launcher is not None:
                    launcher.kill(child.pid, signal.SIGKILL)
            elif launcher is not None:
                child.timers.append(
                    self._loop.call_later(_LOST_EXIT_WAIT, launcher.kill, child.pid, signal.SIGKILL)
                )

    def _reap(self, child: _Child, code: int | None) -> None:
        """The child is gone: fail what it still ran, forget it, let a new one start."""
        if child.state == "dead":
            return
        expected = child.stopping or child.kill_reason is not None
        child.state = "dead"
        child.exitcode = code
        self._children.pop(child.pid, None)
        if child in self._ready:
            self._ready.remove(child)
        for timer in child.timers:
            timer.cancel()
        if child.channel is not None:
            child.channel.close("reaped")
        if not child.boot.done():
            child.boot.set_exception(
                SandboxBootError(
                    f"a sandbox child {describe_exit(code)} while loading {self.target!r}"
                )
            )
        running = [inv for inv in child.inflight.values() if not inv.future.done()]
        if child.kill_reason is not None:
            why = f"sandbox child (pid {child.pid}) was killed: {child.kill_reason}"
        else:
            why = f"sandbox child (pid {child.pid}) {describe_exit(code)} while running the job"
        for inv in child.inflight.values():
            self._drop_handles(inv)
            if inv.timer is not None:
                inv.timer.cancel()
            if not inv.abandoned and not inv.future.done():
                inv.future.set_exception(SandboxCrashError(why, code))
        child.inflight.clear()
        if not expected and child.boot.done() and not child.boot.exception():
            self.counters["crashed"] += 1
            if running:
                log.warning("glidemq sandbox: %s (%d run(s) failed)", why, len(running))
        assert self._changed is not None and self._empty is not None
        self._changed.set()
        if not self._children:
            self._empty.set()

    # -- messages from children -------------------------------------------------------------

    def _on_messages(self, child: _Child, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            kind = m.get("t")
            if kind in (RESULT, ERROR):
                self._on_outcome(child, m, kind == RESULT)
            elif kind == CALL:
                self._on_call(child, m)
            elif kind == HEARTBEAT:
                rss = m.get("rss")
                if isinstance(rss, int):
                    child.rss = rss
                    if not child.inflight:
                        self._check_memory(child)
            elif kind == READY:
                if m.get("v") != PROTOCOL_VERSION and not child.boot.done():
                    child.boot.set_exception(
                        SandboxBootError(f"child speaks protocol {m.get('v')}")
                    )
                    continue
                self._async = bool(m.get("async"))
                if not self._async:
                    child.capacity = 1
                else:
                    per = -(-self._slots // self.size)
                    child.capacity = self.options.child_concurrency or per
                if not child.boot.done():
                    child.boot.set_result(None)
            elif kind == BOOT_ERROR:
                wire = m.get("err") or {}
                cause = error_from_wire(wire)
                name = wire.get("name", type(cause).__name__) if isinstance(wire, dict) else "?"
                error = SandboxBootError(f"cannot load processor {self.target!r}: {name}: {cause}")
                if isinstance(cause.__cause__, RemoteTraceback):
                    error.__cause__ = cause.__cause__
                if not child.boot.done():
                    child.boot.set_exception(error)

    def _on_outcome(self, child: _Child, m: dict[str, Any], ok: bool) -> None:
        inv = child.inflight.pop(m.get("i", -1), None)
        rss = m.get("rss")
        if isinstance(rss, int):
            child.rss = rss
        if inv is not None:
            self._drop_handles(inv)
            if inv.timer is not None:
                inv.timer.cancel()
            if not inv.abandoned and not inv.future.done():
                if ok:
                    inv.future.set_result(m.get("v"))
                else:
                    wire = m.get("err")
                    if isinstance(wire, dict) and wire.get("type") == CANCELLED:
                        error: BaseException = SandboxError("the run was cancelled in the child")
                    else:
                        error = error_from_wire(wire)
                    inv.future.set_exception(error)
        if m.get("retire"):
            self._retire(child, "recycled_memory")
        self._check_memory(child)
        if child.state == "retiring" and not child.inflight:
            self._stop_child(child)
        elif child.state == "ready":
            self._wake(1)

    def _check_memory(self, child: _Child) -> None:
        if self._rss_limit is not None and child.rss > self._rss_limit:
            self._retire(child, "recycled_memory")

    # -- proxied Job calls ----------------------------------------------------------------

    def _on_call(self, child: _Child, m: dict[str, Any]) -> None:
        call_id = m.get("i")
        method = m.get("m")
        args = m.get("a")
        job = self._jobs.get(m.get("h", -1))
        if not isinstance(args, list):
            args = []
        if method not in PROXIED_METHODS:
            self._reply(child, call_id, error=ProtocolError(f"{method!r} is not a proxied method"))
            return
        if job is None:
            error = JobStateError(
                f"#{m.get('h')}", str(method).replace("_", " "), "its run is over in this sandbox"
            )
            self._reply(child, call_id, error=error)
            return
        if method == "discard":
            job.discard()
            self._reply(child, call_id, value=None)
            return
        child.calls += 1
        if child.calls > _PAUSE_CALLS_AT and child.channel is not None:
            child.channel.pause_reading()  # a processor flooding calls waits for the parent
        assert self._loop is not None
        self._loop.create_task(self._call(child, call_id, job, str(method), args))

    async def _call(
        self, child: _Child, call_id: Any, job: Job[Any, Any], method: str, args: list[Any]
    ) -> None:
        try:
            async with child.call_slots:  # bounded: the client caps requests in flight
                value = await _CALLS[method](job, args)
        except Exception as exc:
            self._reply(child, call_id, error=exc)
        else:
            self._reply(child, call_id, value=value)
        finally:
            child.calls -= 1
            if child.calls < _PAUSE_CALLS_AT // 2 and child.channel is not None:
                child.channel.resume_reading()

    def _reply(
        self, child: _Child, call_id: Any, *, value: Any = None, error: BaseException | None = None
    ) -> None:
        if not call_id or child.channel is None:
            return
        if error is not None:
            wire = error_to_wire(error, with_traceback=False)
            child.channel.send({"t": REPLY, "i": call_id, "err": wire})
        else:
            child.channel.send({"t": REPLY, "i": call_id, "ok": value})


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


async def _log(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.log(str(args[0]))


async def _progress(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.update_progress(args[0])


async def _data(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.update_data(args[0])


async def _delayed(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.move_to_delayed(int(args[0]))


async def _failed(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.move_to_failed(error_from_wire(args[0]))


async def _remove(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.remove()


async def _retry(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.retry(str(args[0]) if args else "failed")


async def _priority(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.change_priority(args[0])


async def _delay(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.change_delay(args[0])


async def _promote(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.promote()


async def _state(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.get_state()


async def _revoked(job: Job[Any, Any], args: list[Any]) -> Any:
    return await job.is_revoked()


async def _refresh(job: Job[Any, Any], args: list[Any]) -> Any:
    await job.refresh()
    return job_fields(job)


_CALLS: dict[str, Callable[[Job[Any, Any], list[Any]], Any]] = {
    "log": _log,
    "update_progress": _progress,
    "update_data": _data,
    "move_to_delayed": _delayed,
    "move_to_failed": _failed,
    "remove": _remove,
    "retry": _retry,
    "change_priority": _priority,
    "change_delay": _delay,
    "promote": _promote,
    "get_state": _state,
    "is_revoked": _revoked,
    "refresh": _refresh,
}
