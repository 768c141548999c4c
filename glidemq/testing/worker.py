"""TestWorker: the Worker API running jobs of an in-memory queue, for unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast
from uuid import uuid4

from ..emitter import Emitter
from ..errors import DelayedError, GlideMQError, RateLimitError, UnrecoverableError, ValidationError
from ..failure import expired_error, job_failure, record_failure
from ..keys import DEFAULT_PREFIX, QueueKeys
from ..lifecycle import WorkerLifecycle
from ..processor import ProcessorCall, check_processor
from ..serialize import encode_result
from ..serializers import get_serializer
from ..types import WorkerOptions, job_retention, retention_args, worker_options
from ..worker import Processor, Worker
from . import limits
from .batch import BatchRunner, TestBatchHooks
from .job import TestJob
from .schedulers import fire_due
from .server import MemoryConnection, MemoryServer, resolve_server
from .store import JobRecord
from .support import UNSUPPORTED_WORKER_METHODS, check_options, install_unsupported

__all__ = ["TestWorker"]

D = TypeVar("D")
R = TypeVar("R")


class TestWorker(WorkerLifecycle, Generic[D, R]):
    """Runs `processor(job)` for jobs of an in-memory queue, up to `concurrency` at once.

    The same constructor, options, events, counters and lifecycle as `glidemq.Worker`;
    give it the same `connection` (MemoryServer) as the TestQueue that adds the jobs.
    """

    __test__ = False  # not a pytest test class
    RateLimitError = RateLimitError

    def __init__(
        self,
        name: str,
        processor: Processor[D, R] | Callable[[Any], Any] | str,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        options: WorkerOptions | None = None,
        **settings: Any,
    ) -> None:
        base = worker_options(options, settings)
        check_options(base)
        call = check_processor(processor)
        self.opts = base
        self._serializer = get_serializer(base.serializer)
        self.name = name
        self.keys = QueueKeys(name, prefix)
        self.server: MemoryServer = resolve_server(connection)
        self.connection = self.server
        self.consumer = base.consumer or f"worker-{uuid4().hex}"
        self.events = Emitter()
        self.sandbox_pool: None = None
        self._store = self.server.store(name, prefix)
        self._proc = ProcessorCall(call, base.concurrency, f"glidemq-{name}")
        self._concurrency = base.concurrency * (base.batch.size if base.batch else 1)
        self._batches: BatchRunner[D, R] | None = None
        if base.batch:
            hooks = TestBatchHooks(
                hold=self._hold,
                run=self._proc.batch,
                expired=self._expired,
                fail=self._fail,
                complete=self._complete,
                settle=self._settle_cancelled,
                closing=self.is_closing,
                result_limit=base.max_result_bytes,
                serializer=self._serializer,
            )
            self._batches = BatchRunner(base.batch, hooks)
        self._keep_complete = retention_args(base.remove_on_complete)
        self._keep_fail = retention_args(base.remove_on_fail)
        # entry id -> (job, task) for every job this worker holds
        self._active: dict[str, tuple[TestJob[D, R], asyncio.Task[None] | None]] = {}
        self._revoked: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        super().__init__()  # the lifecycle's state: not started, not paused
        self._drained_emitted = False
        self.started_at = 0
        """When the worker started (ms on the queue's clock; 0 before)."""
        self.completed_count = 0
        self.failed_count = 0

    # -- lifecycle (the rest: glidemq.lifecycle) -------------------------------------------

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Listen to a worker event: active, completed, failed, progress, drained, error,
        paused, resumed, closing, closed (`stalled` never happens in memory)."""
        return self.events.on(event, handler)

    async def start(self) -> None:
        """Start taking jobs."""
        if self._started:
            return
        self._store.claim_serializer(self.opts.serializer, "Worker")
        self._started = True
        self.started_at = self._store.clock.now_ms()
        self._store.workers.add(self)
        self._task = asyncio.get_running_loop().create_task(
            self._fetch_loop(), name=f"glidemq-testing-{self.name}"
        )
        await asyncio.sleep(0)

    def _wake_up(self) -> None:
        self._store.notify()

    async def close(self, force: bool = False, timeout: float | None = None) -> None:
        """Stop taking jobs, let running jobs finish for up to `timeout` seconds (default
        `close_timeout`; none with `force`), then hand unfinished jobs back to the queue.
        Idempotent."""
        self._store.workers.discard(self)  # no longer one of the queue's workers
        await super().close(force, timeout)

    async def _shutdown(self, force: bool, timeout: float) -> None:
        if not self._started:
            return
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._batches is not None:
            self._batches.stop()
        await self._finish_running(force, timeout)
        for entry_id, (job, _) in list(self._active.items()):
            self._store.defer(job.id, entry_id)
        self._active.clear()
        self._store.notify()
        self._proc.shutdown()

    @property
    def active_count(self) -> int:
        """Jobs this worker holds right now (running or being completed)."""
        return len(self._active)

    def _held_tasks(self) -> list[asyncio.Task[Any]]:
        return list({t for _, t in self._active.values() if t is not None and not t.done()})

    def _hold(self, entry_id: str, job: TestJob[D, R], task: asyncio.Task[Any]) -> None:
        self._active[entry_id] = (job, task)

    # -- taking jobs ----------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        while not self._closing:
            try:
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reported like the real worker's background errors
                self.events.emit("error", exc)
                await asyncio.sleep(0.05)

    async def _fetch_once(self) -> None:
        """Take what may start now, or wait for the next change that may allow more."""
        store, clock = self._store, self._store.clock
        free = self._concurrency - len(self._active)
        if self._paused or free <= 0:
            await store.changed(None)
            return
        now = clock.now_ms()
        if store.schedulers:
            fire_due(store, now, lambda exc: self.events.emit("error", exc))
        store.promote(now)
        if store.paused:
            await store.changed(None)
            return
        allowed, wait_ms = limits.allowance(store, free, now, self.opts.limiter)
        if allowed <= 0:  # a rate limit, rate_limit() or the global concurrency
            await store.changed(None if clock.manual else wait_ms / 1000)
            return
        records = store.take(allowed, self, now, self.opts.events) or []
        limits.charge(store, len(records), now, self.opts.limiter)
        if records:
            self._drained_emitted = False
            self._start_jobs(records)
            await asyncio.sleep(0)
            return
        if not self._drained_emitted:
            self._drained_emitted = True
            self.events.emit("drained")
        due = store.next_due(now)
        wait = None
        if due is not None and not clock.manual:
            wait = max(0.001, (due - clock.now_ms()) / 1000)
        await store.changed(wait)

    def _start_jobs(self, records: list[JobRecord]) -> None:
        loop = asyncio.get_running_loop()
        emit_active = self.events.listens("active")
        for rec in records:
            job: TestJob[D, R] = cast(
                TestJob[D, R],
                TestJob.from_record(self._store, rec, runner=self, fail_now=self._fail_now),
            )
            entry_id = job.entry_id or ""
            if self._batches is not None:
                self._active[entry_id] = (job, None)
                self._batches.add(job)
            else:
                self._active[entry_id] = (job, loop.create_task(self._run(job)))
            if emit_active:
                self.events.emit("active", job)
        if self._batches is not None:
            self._batches.dispatch()

    # -- running --------------------------------------------------------------------------

    def _expired(self, job: TestJob[D, R]) -> bool:
        return job.expire_at is not None and self._store.clock.now_ms() > job.expire_at

    async def _run(self, job: TestJob[D, R]) -> None:
        try:
            if self._expired(job):
                raise expired_error()
            result = await self._proc.job(job, job.opts.get("timeout"))
            rv = encode_result(result, self.opts.max_result_bytes, self._serializer)
        except asyncio.CancelledError:
            if job.id in self._revoked and not self._closing:
                self._revoked.discard(job.id)
                await self._fail(job, UnrecoverableError("revoked"))
            return  # closing: the job is handed back by close()
        except DelayedError:
            if job.moved:
                self._release(job)
            else:
                await self._fail(job, DelayedError("DelayedError without move_to_delayed"))
            return
        except BaseException as exc:
            if job.moved:  # move_to_failed already recorded the failure
                self._release(job)
                return
            await self._fail(job, exc)
            return
        if job.moved:
            self._release(job)
            return
        self._complete(job, result, rv)

    def _release(self, job: TestJob[D, R]) -> None:
        self._active.pop(job.entry_id or "", None)
        self._store.notify()

    def _complete(self, job: TestJob[D, R], result: Any, rv: bytes) -> None:
        keep = job_retention(job.opts, "removeOnComplete", self._keep_complete)
        job.returnvalue = result
        status = self._store.complete(
            job.id, job.entry_id or "", rv, keep, self._store.clock.now_ms(), self.opts.events
        )
        self._release(job)
        if status == "ok":
            self.completed_count += 1
            self.events.emit("completed", job, result)

    async def _fail_now(self, job: TestJob[D, R], error: BaseException) -> None:
        """`Job.move_to_failed` from inside the processor."""
        await self._fail(job, error, release=False)

    async def _fail(self, job: TestJob[D, R], error: BaseException, release: bool = True) -> None:
        if isinstance(error, RateLimitError):  # back to the queue, no attempt counted
            now = self._store.clock.now_ms()
            if limits.hand_back(self._store, job.id, job.entry_id or "", error.delay, now) == "ok":
                job.state = "waiting"
            if release:
                self._release(job)
            return
        f = job_failure(job, error, self.opts, self._keep_fail, self.events)
        status = self._store.fail(
            job.id,
            job.entry_id or "",
            f.reason,
            f.delay,
            f.keep,
            self.opts.dead_letter,
            f.stack,
            self._store.clock.now_ms(),
            self.opts.events,
        )
        if release:
            self._release(job)
        record_failure(self, job, error, f.reason, status)

    async def _settle_cancelled(self, jobs: list[TestJob[D, R]]) -> None:
        """A batch cancelled for one job: revoked jobs fail, the rest go back to the queue."""
        for job in jobs:
            if job.id in self._revoked:
                self._revoked.discard(job.id)
                await self._fail(job, UnrecoverableError("revoked"))
            elif (job.entry_id or "") in self._active:
                self._active.pop(job.entry_id or "", None)
                self._store.defer(job.id, job.entry_id or "")
        self._store.notify()

    # -- aborting -------------------------------------------------------------------------

    async def rate_limit(self, ms: int) -> None:
        """Stop every worker of the queue from starting jobs for `ms` milliseconds (running
        jobs go on). From a processor, follow it with `raise Worker.RateLimitError()` to put
        the current job back without counting an attempt."""
        if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
            raise ValidationError("ms", f"must be an integer >= 0, got {ms!r}")
        if not self._started:
            raise GlideMQError("the worker is not started")
        await asyncio.sleep(0)
        limits.limit_for(self._store, ms, self._store.clock.now_ms())

    def abort_job(self, job_id: str) -> bool:
        """Cancel a job this worker is running; it fails with reason `revoked`."""
        for job, task in self._active.values():
            if job.id == job_id and task is not None and not task.done():
                self._revoked.add(job_id)
                task.cancel()
                return True
        return False

    def __repr__(self) -> str:
        return f"<TestWorker {self.name!r} on {self.server!r}>"


install_unsupported(TestWorker, Worker, UNSUPPORTED_WORKER_METHODS)
