"""The parent side of the sandbox: a pool of child processes that run a processor.

The pool lives in a worker process, on its event loop, next to the Worker that owns the
Valkey connection. `run(job)` sends the job to a child and returns what the processor
returned there (or raises what it raised); the Worker treats it as any processor. The pool
keeps `max_children` children warm, replaces the ones that die, recycles the ones that reach
a limit, kills the ones that time out or ignore an abort, and backs off while the processor
cannot be loaded. The children are started, replaced and reaped by a `ChildSet`
(`boot.py`), each is a `ChildHandle` (`handle.py`), and the Job methods they call are run by
a `JobProxy` (`proxy.py`). Runs may also queue in children behind the running ones
(`prefetch_window.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..errors import JobTimeoutError, ValidationError
from ..job.job import Job
from .boot import ChildSet
from .errors import (
    SandboxBootError,
    SandboxClosedError,
    SandboxError,
    SandboxHandBack,
    SandboxUnavailable,
)
from .handle import ChildHandle, Invocation, NotStarted
from .prefetch_window import PrefetchWindow
from .protocol import ABORT, BACK, CALL, ERROR, RESULT, RUN
from .proxy import JobProxy
from .types import SandboxOptions, normalize_target

__all__ = ["SandboxPool"]


class SandboxPool:
    """Runs a processor, given as a `module:attr` or file target, in child processes.

    Built by `Worker(..., sandbox=SandboxOptions(...))`, which passes `run` (or `run_batch`)
    as its processor and starts and closes the pool with itself. `slots` is how many runs
    the Worker may have at once (its concurrency); `on_error` is told about children that
    cannot start. With `hand_back`, a run that never started and finds no child to take it
    raises SandboxHandBack instead of waiting (the Worker puts its job back in the queue),
    and so does every run while no child can load the processor (SandboxUnavailable).
    `on_room` is called when `pipeline_slots` may have grown (a child is ready, or an idle
    one starts a run), so the Worker takes more jobs. `secrets` (the connection's password)
    are kept out of the children's environment, as are GLIDEMQ_URL and the like.
    """

    def __init__(
        self,
        target: str,
        options: SandboxOptions,
        *,
        slots: int,
        batch: bool = False,
        on_error: Callable[[BaseException], None] | None = None,
        hand_back: bool = False,
        on_room: Callable[[], None] | None = None,
        result_limit: int | None = None,
        secrets: tuple[str | None, ...] = (),
    ) -> None:
        self.target = normalize_target(target)
        self.options = options
        self.batch = batch
        self.hand_back = hand_back
        self._on_room = on_room
        self._slots = slots
        self._pipeline = PrefetchWindow(options, self.size, batch)
        self._on_error = on_error
        self._state = "new"
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._proxy = JobProxy()  # the jobs being run, for the methods children call
        self._next_inv = 0
        self._closed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first: asyncio.Future[None] | None = None  # the first child ready, or failed
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
                "handed_back",
            ),
            0,
        )
        self._children = ChildSet(
            self.target,
            options,
            size=self.size,
            slots=slots,
            batch=batch,
            counters=self.counters,
            drop=self._proxy.drop,
            on_messages=self._on_messages,
            on_ready=self._child_ready,
            on_failed=self._child_failed,
            result_limit=result_limit,
            secrets=secrets,
        )

    # -- state ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """How many children the pool keeps: `max_children`, by default the Worker's
        concurrency (one job per child, as a sync processor needs anyway)."""
        return self.options.max_children or self._slots

    @property
    def pipeline_slots(self) -> int:
        """Runs the pool would hold queued in children now: `pipeline_depth` for each child
        that has a free slot or started a run within `pipeline_window`. The Worker takes
        that many jobs beyond its concurrency: the pool is the `SlotExtension` of the
        worker's `Slots` (glidemq/worker/slots.py), which counts them with its own slots."""
        if self._loop is None:
            return 0
        return self._pipeline.open_slots(self._children.ready, self._loop.time())

    @property
    def pipeline_depth(self) -> int:
        """Runs a child may hold queued now: about `pipeline_window` of work at the recent
        run time, at most `SandboxOptions.pipeline` (0 while runs are longer than the
        window; 1 until a run has been timed)."""
        return self._pipeline.limit

    @property
    def max_pipeline_slots(self) -> int:
        """The most runs the pool queues in children beyond those running."""
        return self._pipeline.max_slots

    @property
    def is_async(self) -> bool | None:
        """Whether the processor is a coroutine function (None until a child has loaded it)."""
        return self._children.is_async

    @property
    def state(self) -> str:
        """new, starting, ready, error (no child can start; see `last_error`), closing,
        closed."""
        return self._state

    @property
    def accepting(self) -> bool:
        """Whether a child has loaded the processor and may take runs: the Worker takes
        jobs only then (while starting or in `error`, they stay in the queue)."""
        return self._state == "ready"

    async def wait_started(self) -> None:
        """Wait for the first child to load the processor; raise SandboxBootError if the
        first one to finish starting could not."""
        if self._first is None:
            raise SandboxError("the sandbox pool is not started")
        await asyncio.shield(self._first)

    @property
    def last_error(self) -> SandboxBootError | None:
        """Why the last child that failed to start failed (None if none has)."""
        return self._children.last_error

    @property
    def pids(self) -> list[int]:
        """Pids of the live children."""
        return list(self._children.live)

    @property
    def forkserver_pid(self) -> int | None:
        """Pid of the fork server (None with start_method='spawn')."""
        return self._children.launcher_pid

    def stats(self) -> dict[str, Any]:
        """Counters and the current shape of the pool."""
        live = self._children.live.values()
        last_error = self._children.last_error
        return {
            **self.counters,
            "state": self._state,
            "children": len(live),
            "ready": len(self._children.ready),
            "busy": sum(c.running for c in live),
            "queued": sum(len(c.queued) for c in live),
            "last_error": str(last_error) if last_error else None,
        }

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the children in the background; returns at once. Runs wait for a child."""
        if self._state != "new":
            return
        self._loop = asyncio.get_running_loop()
        self._closed = asyncio.Event()
        self._first = self._loop.create_future()
        self._state = "starting"
        self._children.start(self._loop)

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
        assert self._closed is not None
        self._state = "closing"
        try:
            await self._close()
        finally:
            self._state = "closed"
            self._closed.set()

    async def _close(self) -> None:
        self._pipeline.close()
        await self._children.stop_booting()
        self._wake(len(self._waiters))  # they raise SandboxClosedError
        await self._children.close()

    def _child_ready(self, child: ChildHandle) -> None:
        """`child` has loaded the processor: runs waiting for room may have it."""
        if self._state in ("starting", "error"):
            self._state = "ready"
        if self._first is not None and not self._first.done():
            self._first.set_result(None)
        self._wake(child.capacity + self._pipeline.depth)
        if self._on_room is not None:
            self._on_room()

    def _child_failed(self, error: SandboxBootError) -> None:
        """A child could not start: with none ready, the runs waiting fail with `error`."""
        if not self._children.ready:
            if self._state in ("starting", "ready"):
                self._state = "error"
            if self._first is not None and not self._first.done():
                self._first.set_exception(self._children.boot_error())
                self._first.exception()  # retrieved: nobody may be waiting for it
            self._wake(len(self._waiters))  # they raise the boot error or go back
        if self._on_error is not None:
            self._on_error(error)

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
            child = self._pick() or await self._acquire(self.hand_back)
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
            child = self._pick() or await self._acquire(False)
            inv = self._submit(child, list(jobs), True, seconds)
            try:
                return await self._wait(inv)
            except NotStarted:
                continue

    def _pick(self) -> ChildHandle | None:
        """A ready child with a free slot (the freest), else one to queue the run on."""
        best: ChildHandle | None = None
        best_free = 0
        for child in self._children.ready:
            free = child.free
            if free > best_free:
                best, best_free = child, free
        if best is not None:
            return best
        assert self._loop is not None
        return self._pipeline.queue_behind(self._children.ready, self._loop.time())

    async def _acquire(self, hand_back: bool) -> ChildHandle:
        """The child for a run, once one can take it. With `hand_back`, a run that waits
        looks again every `pipeline_window` and raises SandboxHandBack once the pool is
        stuck (`PrefetchWindow.stuck`), so its job goes back to the queue instead of
        waiting here."""
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
                if self.hand_back:  # its job goes back to the queue, no attempt used
                    raise SandboxUnavailable(
                        f"no sandbox child can load the processor: {self._children.last_error}"
                    )
                raise self._children.boot_error()
            if hand_back and self._pipeline.stuck(
                self._children.ready, self.size, self._loop.time()
            ):
                self.counters["handed_back"] += 1
                raise SandboxHandBack("every child is busy with a long job")
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(fut)
            recheck = (
                self._loop.call_later(self._pipeline.window, _wake_one, fut) if hand_back else None
            )
            try:
                await fut
            finally:
                if recheck is not None:
                    recheck.cancel()
                    with contextlib.suppress(ValueError):  # woken by the timer: still listed
                        self._waiters.remove(fut)

    def _wake(self, n: int) -> None:
        while n > 0 and self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                n -= 1

    def _submit(
        self, child: ChildHandle, jobs: list[Job[Any, Any]], batch: bool, timeout: float | None
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
            self._pipeline.queued(self._loop, self._children.live.values())
        child.inflight[inv.id] = inv
        child.jobs_started += len(jobs)
        self.counters["runs"] += 1
        child.channel.send({"t": RUN, "i": inv.id, "jobs": payload, "batch": batch})
        limit = self.options.max_jobs_per_child
        if limit is not None and child.jobs_started >= limit:
            self._children.retire(child, "recycled_jobs")
        return inv

    def _started(self, child: ChildHandle, inv: Invocation) -> None:
        """`inv` starts on `child` now: its timeout (or, aborted while queued, its abort
        grace) counts from here."""
        assert self._loop is not None
        now = self._loop.time()
        if self._on_room is not None and not self._pipeline.moving(child, now):
            self._on_room()  # the child counts in pipeline_slots again
        inv.started = child.last_start = now
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
            self._children.kill(
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
        self._children.kill(child, f"job {inv.job_ids} on it timed out")

    # -- messages from children -------------------------------------------------------------

    def _on_messages(self, child: ChildHandle, messages: list[dict[str, Any]]) -> None:
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
            else:  # about the child itself: ready, boot_error, heartbeat
                self._children.on_message(child, kind, m)

    def _on_outcome(self, child: ChildHandle, m: dict[str, Any], ok: bool) -> None:
        inv = child.inflight.get(m.get("i", -1))
        if inv is not None and inv.started is not None and self._pipeline.depth:
            assert self._loop is not None
            self._pipeline.timed(self._loop.time() - inv.started)
        freed = child.settle(m, ok, self._proxy.drop)
        if m.get("retire"):  # the child starts nothing more; what it holds comes back
            self._children.retire(child, "recycled_memory")
        elif freed:
            while (inv := child.next_queued()) is not None:
                self._started(child, inv)
        self._settled(child)

    def _settled(self, child: ChildHandle) -> None:
        """Runs of `child` ended or came back: stop it if it retires and has none left,
        else let a waiting run have the room."""
        if child.state == "retiring" and not child.inflight:
            self._children.stop_child(child)
        elif child.state == "ready":
            self._wake(1)


def _wake_one(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
