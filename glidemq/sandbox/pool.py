"""The parent side of the sandbox: a pool of child processes that run a processor.

The pool lives in a worker process, on its event loop, next to the Worker that owns the
Valkey connection. `run(job)` sends the job to a child and returns what the processor
returned there (or raises what it raised); the Worker treats it as any processor. The pool
keeps `max_children` children warm, replaces the ones that die, recycles the ones that reach
a limit, kills the ones that time out or ignore an abort, and backs off while the processor
cannot be loaded. Children come from a launcher (`launcher.py`), each is a `Child` handle
(`child.py`), and the Job methods they call are run by a `JobProxy` (`proxy.py`). Runs may
also queue in children behind the running ones (`pipeline.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..errors import JobTimeoutError, ValidationError
from ..job import Job
from .child import Child, Invocation, NotStarted
from .errors import SandboxBootError, SandboxClosedError, SandboxError
from .launcher import Launcher, new_launcher
from .pipeline import Pipeline
from .protocol import (
    ABORT,
    BACK,
    BOOT_ERROR,
    CALL,
    ERROR,
    HEARTBEAT,
    HELLO,
    PROTOCOL_VERSION,
    READY,
    RESULT,
    RUN,
    HelloMessage,
)
from .proxy import JobProxy
from .types import SandboxOptions, normalize_target

__all__ = ["SandboxPool"]

log = logging.getLogger("glidemq.sandbox")


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
        self._pipeline = Pipeline(options, self.size, batch)
        self._async: bool | None = None  # learnt from the first child that starts
        self._on_error = on_error
        self._state = "new"
        self._last_error: SandboxBootError | None = None
        self._launcher: Launcher | None = None
        self._children: dict[int, Child] = {}
        self._early_exits: dict[int, int | None] = {}  # exits seen before the child was known
        self._ready: list[Child] = []
        self._booting = 0
        self._boot_tasks: set[asyncio.Task[None]] = set()
        self._boot_failures = 0
        self._next_boot_at = 0.0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._proxy = JobProxy()  # the jobs being run, for the methods children call
        self._next_inv = 0
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
                "requeued",
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
    def pipeline_slots(self) -> int:
        """Runs the pool would queue in children now (0 while runs are long); the Worker
        takes that many jobs beyond its concurrency."""
        return self._pipeline.slots

    @property
    def max_pipeline_slots(self) -> int:
        """The most runs the pool queues in children beyond those running."""
        return self._pipeline.max_slots

    @property
    def _async_capacity(self) -> int:
        """Runs one child of an async processor takes at once."""
        return self.options.child_concurrency or -(-self._slots // self.size)

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
            "busy": sum(c.running for c in self._children.values()),
            "queued": sum(len(c.queued) for c in self._children.values()),
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
        self._pipeline.close()
        tasks = [t for t in (self._maintainer, *self._boot_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._wake(len(self._waiters))
        for child in list(self._children.values()):
            child.close_runs(self._proxy.drop)
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
        the child is killed and this raises JobTimeoutError('timeout'), counted from when
        the run starts in the child (not while it waits queued there). Cancelling the caller
        (revoke, lost lock, close) aborts the run in the child.
        """
        timeout = job.opts.get("timeout") or self.options.timeout
        seconds = timeout / 1000 if timeout else None
        while True:
            child = self._pick() or await self._acquire()
            inv = self._submit(child, [job], False, seconds)
            try:
                return await self._wait(inv)
            except NotStarted:  # queued on a child that died or gave it back: try another
                continue

    async def run_batch(self, jobs: Sequence[Job[Any, Any]]) -> Any:
        """Run a batch processor on `jobs` in one child, in one round trip; returns its list
        of results (an item may be an exception) or raises its error."""
        timeout = self.options.timeout
        seconds = timeout / 1000 if timeout else None
        while True:
            child = self._pick() or await self._acquire()
            inv = self._submit(child, list(jobs), True, seconds)
            try:
                return await self._wait(inv)
            except NotStarted:
                continue

    def _pick(self) -> Child | None:
        """A ready child with a free slot (the freest), else one to queue the run on."""
        best: Child | None = None
        best_free = 0
        for child in self._ready:
            free = child.free
            if free > best_free:
                best, best_free = child, free
        if best is not None:
            return best
        assert self._loop is not None
        return self._pipeline.queue_behind(self._ready, self._loop.time())

    async def _acquire(self) -> Child:
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

    def _submit(
        self, child: Child, jobs: list[Job[Any, Any]], batch: bool, timeout: float | None
    ) -> Invocation:
        assert self._loop is not None and child.channel is not None
        handles, entries = self._proxy.register(jobs)
        self._next_inv += 1
        inv = Invocation(self._next_inv, child, self._loop.create_future(), handles)
        inv.job_ids = jobs[0].id if len(jobs) == 1 else ",".join(j.id for j in jobs)
        inv.timeout = timeout
        try:
            payload = orjson.Fragment(orjson.dumps(entries))
        except TypeError as exc:  # fields come from JSON, but a caller may build Jobs by hand
            self._proxy.drop(inv.handles)
            raise ValidationError("data", f"not JSON-serializable: {exc}") from None
        if child.running < child.capacity:
            self._started(child, inv)
        else:
            child.queued[inv.id] = inv
            self._pipeline.queued(self._loop, self._children.values())
        child.inflight[inv.id] = inv
        child.jobs_started += len(jobs)
        self.counters["runs"] += 1
        child.channel.send({"t": RUN, "i": inv.id, "jobs": payload, "batch": batch})
        limit = self.options.max_jobs_per_child
        if limit is not None and child.jobs_started >= limit:
            self._retire(child, "recycled_jobs")
        return inv

    def _started(self, child: Child, inv: Invocation) -> None:
        """`inv` starts on `child` now: its timeout (or, aborted while queued, its abort
        grace) counts from here."""
        assert self._loop is not None
        inv.started = child.last_start = self._loop.time()
        if inv.abandoned:
            inv.timer = self._loop.call_later(self.options.abort_grace, self._abort_expired, inv)
        elif inv.timeout:
            inv.timer = self._loop.call_later(inv.timeout, self._on_timeout, inv)

    async def _wait(self, inv: Invocation) -> Any:
        try:
            return await inv.future
        except asyncio.CancelledError:
            if inv.future.cancelled():  # the caller was cancelled: abort the run
                self._abandon(inv)
            raise
        finally:
            if inv.timer is not None and not inv.abandoned:
                inv.timer.cancel()

    def _abandon(self, inv: Invocation) -> None:
        child = inv.child
        if inv.id not in child.inflight:
            return
        inv.abandoned = True
        inv.finish(self._proxy.drop)
        if child.state in ("dying", "dead") or child.channel is None:
            return
        self.counters["aborted"] += 1
        child.channel.send({"t": ABORT, "i": inv.id})
        if inv.started is not None:  # a queued run gets its grace when (if) it starts
            assert self._loop is not None
            inv.timer = self._loop.call_later(self.options.abort_grace, self._abort_expired, inv)

    def _abort_expired(self, inv: Invocation) -> None:
        if inv.id in inv.child.inflight:
            self._kill(
                inv.child,
                f"job {inv.job_ids} did not stop within {self.options.abort_grace:g} s "
                "of being aborted",
            )

    def _on_timeout(self, inv: Invocation) -> None:
        child = inv.child
        if inv.future.done() or child.inflight.pop(inv.id, None) is None:
            return
        self._proxy.drop(inv.handles)
        self.counters["timeouts"] += 1
        inv.future.set_exception(JobTimeoutError("timeout"))
        self._kill(child, f"job {inv.job_ids} on it timed out")

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
        launcher = new_launcher(self.options, self.target, self._on_exit, self._on_launcher_lost)
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
            "cap": self._async_capacity,
        }

    async def _boot_child(self) -> None:
        assert self._loop is not None and self._changed is not None
        child: Child | None = None
        try:
            if self._launcher is None:
                return
            pid, sock = await self._launcher.launch()
            child = Child(pid, self._loop)
            self._children[pid] = child
            assert self._empty is not None
            self._empty.clear()
            self.counters["started"] += 1
            channel = child.connect(sock, self._loop, self._on_messages, self._on_closed)
            channel.send(self._hello())
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
        self._wake(child.capacity + self._pipeline.depth)

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

    def _retire(self, child: Child, reason: str) -> None:
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

    def _stop_child(self, child: Child) -> None:
        assert self._loop is not None
        child.stop(self._loop, self.options.abort_grace + 1.0, self._kill)

    def _kill(self, child: Child, reason: str) -> None:
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
        child.terminate(self._launcher, self._loop, self.options.kill_grace)

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

    def _on_closed(self, child: Child, reason: str) -> None:
        """The child's socket closed: it is exiting (the exit status follows) or broken."""
        if child.state == "dead":
            return
        if child in self._ready:
            self._ready.remove(child)
        if child.state in ("booting", "ready", "retiring"):
            child.state = "dying"
            assert self._changed is not None and self._loop is not None
            self._changed.set()
            child.disconnected(reason, self._launcher, self._loop)

    def _reap(self, child: Child, code: int | None) -> None:
        """The child is gone: fail what it still ran, forget it, let a new one start."""
        if child.state == "dead":
            return
        expected = child.stopping or child.kill_reason is not None
        running = sum(
            not inv.future.done() and inv.id not in child.queued for inv in child.inflight.values()
        )
        self.counters["requeued"] += sum(
            not inv.abandoned and not inv.future.done() for inv in child.queued.values()
        )
        why = child.reap(code, self.target, self._proxy.drop)
        self._children.pop(child.pid, None)
        if child in self._ready:
            self._ready.remove(child)
        if not expected and child.boot.done() and not child.boot.exception():
            self.counters["crashed"] += 1
            if running:
                log.warning("glidemq sandbox: %s (%d run(s) failed)", why, running)
        assert self._changed is not None and self._empty is not None
        self._changed.set()
        if not self._children:
            self._empty.set()

    # -- messages from children -------------------------------------------------------------

    def _on_messages(self, child: Child, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            kind = m.get("t")
            if kind in (RESULT, ERROR):
                self._on_outcome(child, m, kind == RESULT)
            elif kind == BACK:
                self.counters["requeued"] += child.given_back(m.get("ids"), self._proxy.drop)
                self._settled(child)
            elif kind == CALL:
                assert self._loop is not None
                self._proxy.on_call(child, m, self._loop)
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
                child.capacity = self._async_capacity if self._async else 1
                if not child.boot.done():
                    child.boot.set_result(None)
            elif kind == BOOT_ERROR:
                child.fail_boot(m.get("err") or {}, self.target)

    def _on_outcome(self, child: Child, m: dict[str, Any], ok: bool) -> None:
        inv = child.inflight.get(m.get("i", -1))
        if inv is not None and inv.started is not None and self._pipeline.depth:
            assert self._loop is not None
            self._pipeline.timed(self._loop.time() - inv.started)
        freed = child.settle(m, ok, self._proxy.drop)
        if m.get("retire"):  # the child starts nothing more; what it holds comes back
            self._retire(child, "recycled_memory")
        elif freed:
            while (inv := child.next_queued()) is not None:
                self._started(child, inv)
        self._settled(child)

    def _settled(self, child: Child) -> None:
        """Runs of `child` ended or came back: stop it if it retires and has none left,
        else let a waiting run have the room."""
        if child.state == "retiring" and not child.inflight:
            self._stop_child(child)
        elif child.state == "ready":
            self._wake(1)

    def _check_memory(self, child: Child) -> None:
        if self._rss_limit is not None and child.rss > self._rss_limit:
            self._retire(child, "recycled_memory")
