"""TestWorker: the Worker API running jobs of an in-memory queue, for unit tests."""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, cast
from uuid import uuid4

from ..backoff import retry_delay
from ..emitter import Emitter
from ..errors import (
    DelayedError,
    GlideMQError,
    JobTimeoutError,
    RateLimitError,
    UnrecoverableError,
    ValidationError,
)
from ..keys import DEFAULT_PREFIX, QueueKeys
from ..serialize import encode_json
from ..types import WorkerOptions, from_mapping, job_retention, retention_args
from ..worker import Processor, Worker
from . import limits
from .batch import BatchRunner
from .job import TestJob
from .server import MemoryConnection, MemoryServer, resolve_server
from .store import JobRecord
from .support import UNSUPPORTED_WORKER_METHODS, check_options, install_unsupported

__all__ = ["TestWorker"]

D = TypeVar("D")
R = TypeVar("R")


class Expired(GlideMQError):
    """A job picked up after its ttl ran out (reason `expired`)."""


class TestWorker(Generic[D, R]):
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
        base = options or WorkerOptions()
        if settings:
            from_mapping(WorkerOptions, settings)  # rejects unknown names with a hint
            base = replace(base, **settings)
        check_options(base)
        if not callable(processor):
            hint = ""
            if isinstance(processor, str):
                hint = " (a 'module:attr' target runs only with sandbox=SandboxOptions(...))"
            raise ValidationError("processor", f"must be callable, got {processor!r}{hint}")
        self.opts = base
        self.name = name
        self.keys = QueueKeys(name, prefix)
        self.server: MemoryServer = resolve_server(connection)
        self.connection = self.server
        self.consumer = base.consumer or f"worker-{uuid4().hex}"
        self.events = Emitter()
        self.sandbox_pool: None = None
        self._store = self.server.store(name, prefix)
        self._processor: Callable[[Any], Any] = processor
        self._is_async = inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
            type(processor).__call__
        )
        self._concurrency = base.concurrency * (base.batch.size if base.batch else 1)
        self._batches: BatchRunner[D, R] | None = (
            BatchRunner(self, base.batch) if base.batch else None
        )
        self._keep_complete = retention_args(base.remove_on_complete)
        self._keep_fail = retention_args(base.remove_on_fail)
        # entry id -> (job, task) for every job this worker holds
        self._active: dict[str, tuple[TestJob[D, R], asyncio.Task[None] | None]] = {}
        self._revoked: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._closing = False
        self._closed = asyncio.Event()
        self._force_close = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._paused = False
        self._drained_emitted = False
        self._started_at = 0
        self.completed_count = 0
        self.failed_count = 0

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Listen to a worker event: active, completed, failed, progress, drained, error,
        paused, resumed, closing, closed (`stalled` never happens in memory)."""
        return self.events.on(event, handler)

    async def start(self) -> None:
        """Start taking jobs."""
        if self._started:
            return
        self._started = True
        self._started_at = self._store.clock.now_ms()
        self._store.workers.add(self)
        self._task = asyncio.get_running_loop().create_task(
            self._fetch_loop(), name=f"glidemq-testing-{self.name}"
        )
        await asyncio.sleep(0)

    async def run(self) -> None:
        """Start (if needed) and wait until the worker is closed."""
        await self.start()
        await self._closed.wait()

    async def wait_until_ready(self) -> None:
        """Same as `start()`."""
        await self.start()

    def is_running(self) -> bool:
        return self._started and not self._closing

    def is_paused(self) -> bool:
        return self._paused

    def _accepting(self) -> bool:
        return self._started and not self._closing and not self._paused

    @property
    def active_count(self) -> int:
        """Jobs this worker holds right now."""
        return len(self._active)

    def pause(self) -> None:
        """Stop taking new jobs; running jobs go on."""
        self._paused = True
        self.events.emit("paused")

    def resume(self) -> None:
        """Take jobs again after `pause()`."""
        self._paused = False
        self._store.notify()
        self.events.emit("resumed")

    async def close(self, force: bool = False, timeout: float | None = None) -> None:
        """Stop taking jobs, let running jobs finish for up to `timeout` seconds (default
        `close_timeout`; none with `force`), then hand unfinished jobs back to the queue.
        Idempotent."""
        if self._closing:
            if force:
                self._force_close.set()
            await self._closed.wait()
            return
        self._closing = True
        self._store.workers.discard(self)
        self.events.emit("closing")
        try:
            await self._shutdown(force, self.opts.close_timeout if timeout is None else timeout)
        finally:
            self._closed.set()
            self.events.emit("closed")

    async def _shutdown(self, force: bool, timeout: float) -> None:
        if not self._started:
            return
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._batches is not None:
            self._batches.stop()
        running = list({t for _, t in self._active.values() if t is not None and not t.done()})
        if running and not force and timeout > 0:
            finished = asyncio.ensure_future(asyncio.wait(running))
            forced = asyncio.ensure_future(self._force_close.wait())
            await asyncio.wait(
                {finished, forced}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            finished.cancel()
            forced.cancel()
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for entry_id, (job, _) in list(self._active.items()):
            self._store.defer(job.id, entry_id)
        self._active.clear()
        self._store.notify()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

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
                TestJob[D, R], TestJob.from_record(self._store, rec, runner=self)
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

    async def _in_thread(self, arg: Any) -> Any:
        """Run a sync processor on this worker's own threads (one per concurrency slot)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self.opts.concurrency, thread_name_prefix=f"glidemq-{self.name}"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._processor, arg)

    async def _call(self, job: TestJob[D, R]) -> Any:
        if self._is_async:
            return await self._processor(job)
        result = await self._in_thread(job)
        if inspect.isawaitable(result):
            return await result
        return result

    def _expired(self, job: TestJob[D, R]) -> bool:
        return job.expire_at is not None and self._store.clock.now_ms() > job.expire_at

    async def _run(self, job: TestJob[D, R]) -> None:
        try:
            if self._expired(job):
                raise Expired("expired")
            timeout = job.opts.get("timeout")
            if timeout:
                try:
                    result = await asyncio.wait_for(self._call(job), timeout / 1000)
                except TimeoutError:
                    raise JobTimeoutError("timeout") from None
            else:
                result = await self._call(job)
            try:
                rv = encode_json(result)
            except TypeError as exc:
                raise TypeError(f"return value is not JSON-serializable: {exc}") from None
        except asyncio.CancelledError:
            if job.id in self._revoked and not self._closing:
                self._revoked.discard(job.id)
                await self._fail(job, UnrecoverableError("revoked"))
            return  # closing: the job is handed back by close()
        except DelayedError:
            if job._moved:
                self._release(job)
            else:
                await self._fail(job, DelayedError("DelayedError without move_to_delayed"))
            return
        except BaseException as exc:
            if job._moved:  # move_to_failed already recorded the failure
                self._release(job)
                return
            await self._fail(job, exc)
            return
        if job._moved:
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
        final = isinstance(error, UnrecoverableError | Expired) or job.discarded
        delay = -1
        if not final:
            try:
                delay = retry_delay(
                    job.opts.get("backoff"),
                    job.attempts_made + 1,
                    error,
                    self.opts.backoff_strategies,
                )
            except KeyError as exc:
                self.events.emit(
                    "error", ValidationError("backoff.type", f"no backoff strategy named {exc}")
                )
                delay = 0
        reason = str(error) or type(error).__name__
        keep = job_retention(job.opts, "removeOnFail", self._keep_fail)
        stack = "".join(traceback.format_exception(error))[-4000:]
        status = self._store.fail(
            job.id,
            job.entry_id or "",
            reason,
            delay,
            keep,
            self.opts.dead_letter,
            stack,
            self._store.clock.now_ms(),
            self.opts.events,
        )
        if release:
            self._release(job)
        if status in ("retry", "failed"):
            self.failed_count += 1
            job.attempts_made += 1
            job.failed_reason = reason
            job.state = "failed" if status == "failed" else "retrying"
            self.events.emit("failed", job, error)

    # -- aborting -------------------------------------------------------------------------

    def _on_revoked(self, job_id: str) -> None:
        """The queue revoked a job this worker runs: abort it (the real worker learns of it
        at its next heartbeat)."""
        self.abort_job(job_id)

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
