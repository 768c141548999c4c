"""Worker: takes jobs from a queue's stream and runs a processor on them.

Steady state costs at most one FCALL per job and usually much less: completions that finish
in the same event-loop iteration go out together in one `completeAndFetchNext`, which also
takes the next jobs. Only an idle worker blocks, on a client of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from uuid import uuid4

from .. import wire
from ..client import otel
from ..client.connection import ConnectionLike, close_client, create_client, resolve_connection
from ..client.context import QueueContext
from ..client.functions import ensure_library
from ..emitter import Emitter
from ..encoding.serialize import encode_result
from ..encoding.serializers import get_serializer
from ..errors import DelayedError, DurabilityError, GlideMQError, RateLimitError, UnrecoverableError
from ..job.job import Job
from ..keys import DEFAULT_PREFIX, QueueKeys
from ..options.durability import DurabilityLike
from ..process import ledger as run_ledger
from ..processor import ProcessorCall
from ..sandbox.errors import SandboxHandBack
from ..timing.clock import monotonic, perf_counter
from ..types import WorkerOptions, job_retention, retention_args, worker_options
from ..wire.features import claim_serializer
from . import limits as worker_limits
from .batch import BatchOutcomes, BatchRunner
from .executor import executor_for
from .failure import expired_error, job_failure, record_failure
from .fetcher import Fetcher, InOrder
from .forget import LostFetches
from .hold import HeldJobs, HoldWindow, send_back
from .intake import Intake
from .lease import Lease, Revalidation
from .lifecycle import WorkerLifecycle
from .link import WorkerLink
from .maintenance import Maintenance
from .slots import Slots
from .starts import ALL_RECORDED, Recording, StartReports
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ..sandbox.pool import SandboxPool

__all__ = ["Processor", "Worker"]

log = logging.getLogger("glidemq.worker")

D = TypeVar("D")
R = TypeVar("R")

Processor = Callable[[Job[D, R]], Awaitable[R]]
"""What a Worker runs: an async function of a `Job` returning its result (a plain function,
run in a thread, is accepted too)."""

# Completions go out in up to 4 flushes in flight (glidemq.worker.intake) of about concurrency/4
# jobs each, so the server works on one chunk while this process runs the jobs of another.
_FLUSH_DIVISOR = 4
_REASON_REVOKED = "revoked"


def _pairs(flat: list[Any]) -> dict[bytes, bytes]:
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def _start_limited(opts: WorkerOptions) -> bool:
    """Whether the worker limits starts itself (a rate or token limit checked when the
    server activates a job): then it holds no job, so activation and start stay together."""
    return opts.limiter is not None or opts.token_limiter is not None


class Worker(WorkerLifecycle, Generic[D, R]):
    """Runs `processor(job)` for jobs of queue `name`, up to `concurrency` at once.

    Start it with `async with Worker(...)`, `await worker.start()` or `await worker.run()`;
    stop it with `close()`, which lets running jobs finish (up to `close_timeout`) and hands
    the rest back to the queue. Options are `WorkerOptions` fields, as keywords or `options=`.
    `durability` overrides the connection's: completions, failures and every other write
    are acknowledged only once confirmed (docs/DURABILITY.md).
    """

    RateLimitError = RateLimitError

    def __init__(
        self,
        name: str,
        processor: Processor[D, R] | Callable[[Job[D, R]], R] | str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        options: WorkerOptions | None = None,
        durability: DurabilityLike = None,
        **settings: Any,
    ) -> None:
        base = worker_options(options, settings)
        self.connection = resolve_connection(connection).with_durability(durability)
        # In batch mode `concurrency` counts batches; the worker holds that many batches' jobs.
        concurrency = base.concurrency * (base.batch.size if base.batch else 1)
        hooks = {
            "on_error": lambda exc: self.events.emit("error", exc),
            "on_room": self._wake_up,
            "secrets": (self.connection.password,),
        }
        self._executor = executor = executor_for(
            processor, base, concurrency, start_limited=_start_limited(base), pool_hooks=hooks
        )
        self.sandbox_pool: SandboxPool | None = executor.pool
        """The sandbox pool running the processor in child processes (with `sandbox=`)."""
        self._hold: HoldWindow | None = executor.hold
        self.opts = base
        self._serializer = get_serializer(base.serializer)
        self.name = name
        self.keys = QueueKeys(name, prefix)
        self.consumer = base.consumer or f"worker-{uuid4().hex}"
        self.events = Emitter(f"worker of queue {name}")
        self._proc = ProcessorCall(executor.call, base.concurrency, f"glidemq-{name}")
        # Jobs held beyond the concurrency: in the hold window, or queued in sandbox children.
        held = concurrency + executor.extra
        # Every slot count and the table of jobs held (entry id -> job, task) live here.
        self._slots: Slots[Job[D, R]] = Slots(
            concurrency, base.prefetch or held, extension=executor.extension
        )
        # A durability wait holds the connection, so flushes in flight queue behind each
        # other's waits: with durability every pending completion goes in one flush.
        divisor = 1 if self.connection.durability is not None else _FLUSH_DIVISOR
        flush_size = max(base.batch.size if base.batch else 1, -(-held // divisor))
        # Asked once: None (OpenTelemetry absent or no provider) keeps the job path as is.
        self._tracing = otel.job_tracing()
        self._keep_complete = retention_args(base.remove_on_complete)
        self._tasks: list[asyncio.Task[None]] = []
        super().__init__()  # the lifecycle's state: not started, not paused
        self._link = WorkerLink(
            self,
            name=name,
            keys=self.keys,
            consumer=self.consumer,
            opts=base,
            connection=self.connection,
            events=self.events,
            slots=self._slots,
            fail_now=self._fail_now,
            pacer=worker_limits.Pacer.for_limit(base.limiter),
        )
        self._emit_flag = self._link.emit_flag
        self._held = HeldJobs(self._link, self._hold, self._spawn)
        # Jobs taken start without asking the server only while their lease is alive.
        self._lease = Lease(base.lock_duration)
        self._revalidation = Revalidation(self._link, self._lease, self._resume_held, self._spawn)
        self._batches: BatchRunner[D, R] | None = None
        if base.batch:
            outcomes = BatchOutcomes(self._complete_later, self._fail_counted, self._defer)
            self._batches = BatchRunner(
                self._link, base.batch, self._proc, outcomes, self._serializer
            )
        self._order = InOrder(self._start_jobs, self._slots)
        self._starts = StartReports(self._slots, self._hold)  # glidemq/worker/starts.py
        lost = LostFetches(self._link, self._spawn)  # glidemq/worker/forget.py
        self._intake = Intake(
            self._link, self._order, flush_size, self._stored, self._starts, self._recorded, lost
        )
        self._fetcher = Fetcher(
            self._link, self._order, self._intake.completing, self._starts, self._recorded, lost
        )
        self._intake.fetcher = self._fetcher
        self.watchdog = Watchdog(self._link, self._fetcher, self._restart_fetch)
        """Replaces this worker's clients when its connection goes silent (`watchdog`)."""
        self.completed_count = 0
        self.failed_count = 0
        # Job id -> done once the failure of its running try is recorded; a later try of the
        # same job waits for it, so a job's events keep the order of its tries.
        self._failing: dict[str, asyncio.Future[None]] = {}

    # -- lifecycle (the rest: glidemq.worker.lifecycle) -------------------------------------------

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Listen to a worker event: active, completed, failed, stalled, drained, error,
        paused, resumed, closing, closed, quarantined (entry_id, reason: a stream entry
        glidemq did not write was moved to the queue's quarantine stream)."""
        return self.events.on(event, handler)

    @property
    def _ctx(self) -> QueueContext | None:
        return self._link.ctx

    @property
    def active_count(self) -> int:
        """Jobs this worker holds right now (running, held to run next, or being completed)."""
        return len(self._slots)

    def running_jobs(self, most: int = 20) -> list[Job[D, R]]:
        """Up to `most` of the jobs this worker runs now (not those it only holds)."""
        held = {id(job) for _, job in self._slots.held_jobs()}
        return [job for _, job in self._slots.jobs() if id(job) not in held][:most]

    def _held_tasks(self) -> list[asyncio.Task[Any]]:
        return self._slots.tasks()

    def _stored(self, job: Job[D, R]) -> None:
        """The server stored a completion of this worker's."""
        self.completed_count += 1
        if self.events.listens("completed"):
            self.events.emit("completed", job, job.returnvalue)

    async def start(self) -> None:
        """Connect, make sure the consumer group exists, and start taking jobs."""
        if self._started:
            return
        self._started = True
        link = self._link
        try:
            link.client = await create_client(self.connection, name=f"glidemq-{self.consumer}")
            link.blocking = await create_client(self.connection, name=f"glidemq-{self.consumer}-b")
            await ensure_library(link.client)
            link.ctx = QueueContext(
                link.client,
                self.keys,
                retry=self.connection.retry,
                serializer=self._serializer,
                clock=self.connection.clock,
                durability=self.connection.confirmation,
                request_timeout_ms=self.connection.request_timeout_ms,
                where=self.connection.where,
            )
            await claim_serializer(link.ctx, self.opts.serializer, "Worker")
            self.watchdog.attach(link.ctx)
            await self._fetcher.ensure_group()
            await self._executor.start()  # a sandbox's children start in the background
        except BaseException:
            await close_client(link.client)
            await close_client(link.blocking)
            # Not started: close() has nothing to stop and a later start() may try again.
            link.client = link.blocking = link.ctx = None
            self._started = False
            raise
        maintenance = Maintenance(self._link)
        await maintenance.register()  # listed by Queue.get_workers once started
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._fetcher.loop(), name=f"glidemq-fetch-{self.name}"),
            *maintenance.start(),
            self.watchdog.start(),
        ]

    def _wake_up(self) -> None:
        self._slots.wake()

    async def _restart_fetch(self) -> None:
        """Stop the fetch loop (it may hang in a read on a replaced client) and start a new
        one unless the worker is closing."""
        fetch = self._tasks[0] if self._tasks else None
        if fetch is not None and not fetch.done():
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetch
        if self._tasks and not self._closing:
            self._fetcher.progress_at = monotonic()
            self._tasks[0] = asyncio.get_running_loop().create_task(
                self._fetcher.loop(), name=f"glidemq-fetch-{self.name}"
            )

    async def _shutdown(self, force: bool, timeout: float) -> None:
        if not self._started:
            return
        fetcher = self._tasks[0]
        fetcher.cancel()
        # Closing the blocking client ends an XREADGROUP BLOCK in progress on the server.
        await close_client(self._link.blocking)
        await asyncio.gather(fetcher, return_exceptions=True)
        if self._batches is not None:
            self._batches.stop()
        self._revalidation.cancel()
        await self._held.give_back()
        await self._finish_running(force, timeout)
        await self._executor.close()
        await self._intake.drain()
        for t in self._tasks[1:]:
            t.cancel()
        await asyncio.gather(*self._tasks[1:], return_exceptions=True)
        if self._ctx is not None:
            try:
                await wire.fetch.defer_active(self._ctx, self.consumer)
            except GlideMQError as exc:
                # Jobs left in the PEL are still recovered by stall recovery.
                self.events.emit("error", exc)
        self._slots.clear()
        self._proc.shutdown()
        self._link.report.flush(everything=True)
        await close_client(self._link.client)

    # -- taking jobs ----------------------------------------------------------------------

    def _start_jobs(self, flat: list[Any], sent: float, rec: Recording = ALL_RECORDED) -> None:
        """Start (or hold) the jobs of a fetch reply; `sent`: when its call was sent, where
        their lease starts (glidemq/worker/lease.py); `rec`: what it asked the server to
        record (glidemq/worker/starts.py): jobs whose start it did not wait held."""
        self._starts.delivered(rec)
        if not flat:
            return
        if self._closing:
            # Jobs a flush fetched in the meantime go back unrun (at-most-once ones too).
            pairs = [flat[i + k].decode() for i in range(0, len(flat), 3) for k in (0, 1)]
            self._spawn(send_back(self._link, pairs))
            return
        self._fetcher.delivered()
        assert self._ctx is not None
        loop = asyncio.get_running_loop()
        ctx = self._ctx
        link, slots = self._link, self._slots
        emit_active = self.events.listens("active")
        holding, running = self._hold is not None, slots.executing
        # A reply read after its lease ran out (the process was frozen, the server stalled):
        # every job of it waits until the server says which are still this worker's.
        fresh = self._lease.alive(sent)
        marked = rec.start_now is not None  # the server may have held some: it marks them
        unrecorded = False
        for i in range(0, len(flat), 3):
            entry_id = flat[i].decode()
            fields = _pairs(flat[i + 2])
            slots.start()
            job: Job[D, R] = Job(ctx, fields, entry_id=entry_id, worker=link)
            if job.decode_error is not None:
                # Data or options no producer should have written: fail the job, keep going.
                error = UnrecoverableError(f"cannot decode job: {job.decode_error}")
                slots.hold(entry_id, job, loop.create_task(self._fail_undecodable(job, error)))
                continue
            if marked and fields.get(b"heldEntry") == flat[i]:
                suspect = b"suspect" in fields  # held until its start is recorded
                slots.hold_back(entry_id, job, sent, recorded=False, exact_only=suspect)
                unrecorded = True
                continue
            if not fresh or (holding and slots.executing > slots.capacity) or slots.isolating():
                slots.hold_back(entry_id, job, sent)  # starts when it may (_resume_held)
                continue
            if self._batches is not None:
                slots.hold(entry_id, job, None)
                self._batches.add(job)
                if emit_active:
                    self.events.emit("active", job)
            else:
                slots.hold(entry_id, job, self._run_task(entry_id, job, sent))
        if self._batches is not None:
            self._batches.dispatch()
        started = slots.executing - running
        if not fresh:
            self._revalidation.request()
        elif unrecorded and slots.executing < slots.capacity:
            self._resume_held()  # a slot is free: ask the server to record the next start
        self._held.fetched(started > 0)

    def pause(self) -> None:
        """Stop taking new jobs; running jobs go on, held ones go back to the queue."""
        super().pause()
        if self._slots.held_count and self._started:
            self._spawn(self._held.give_back())

    def _resume_held(self) -> None:
        """Start held jobs in the free slots, oldest first, while their lease is alive and
        their start is recorded; else the server is asked first (a heartbeat,
        glidemq/worker/lease.py; a start report, glidemq/worker/starts.py)."""
        slots, lease = self._slots, self._lease
        holding = self._hold is not None
        now = monotonic()
        started = 0
        while slots.held_count and not (holding and slots.executing >= slots.capacity):
            if slots.isolating():  # a suspect runs alone (glidemq/worker/starts.py)
                suspect = slots.take_suspect()
                if suspect is not None:
                    self._begin(*suspect)
                    started += 1
                break
            leased = slots.first_leased()
            if leased is not None and not lease.alive(leased, now):
                self._revalidation.request()
                break
            held = slots.next_held()
            if held is None:
                if slots.held_count:
                    self._intake.report()  # the oldest waits for its start to be recorded
                break
            self._begin(*held, leased)
            started += 1
        if started:
            if self._batches is not None:
                self._batches.dispatch()
            self._held.started()
        if holding and slots.held_count and self._starts.wanted():
            self._intake.report()  # record the next starts ahead

    def _recorded(self) -> None:
        """A start report was answered (recorded, or failed: then held jobs recorded before
        it may start, and it is sent again): held jobs may start in free slots."""
        if self._slots.held_count and not (self._closing or self._paused):
            self._resume_held()

    def _begin(self, entry_id: str, job: Job[D, R], leased: float | None) -> None:
        """Start the run of a job that was held (its lease started at `leased`)."""
        since = monotonic() if leased is None else leased
        if self._batches is not None:
            self._slots.hold(entry_id, job, None)
            self._batches.add(job)
            if self.events.listens("active"):
                self.events.emit("active", job)
        else:
            self._slots.hold(entry_id, job, self._run_task(entry_id, job, since))

    def _run_task(self, entry_id: str, job: Job[D, R], leased: float) -> asyncio.Task[str]:
        """The task running a try of `job` (once its last try's failure is recorded, when
        that is on its way)."""
        failing = self._failing.get(job.id) if self._failing else None
        if failing is not None:
            run = self._run_after(failing, entry_id, job, leased)
        elif self._tracing is None:
            run = self._run(job, leased)
        else:
            run = self._traced_run(self._tracing, job, leased)
        return asyncio.get_running_loop().create_task(run)

    async def _run_after(
        self, recorded: asyncio.Future[None], entry_id: str, job: Job[D, R], leased: float
    ) -> str:
        """Run a try of a job once this worker recorded its previous try's failure.

        The client may hand replies back out of order, so the next try (fetched on another
        connection as soon as the server re-queued the job) could start, and even end,
        before the previous one's `failed` was emitted. The wait is not covered by the
        lease the job came with (`leased`): a job whose lease ran out meanwhile is held
        until the server says it is still this worker's, and one that waited into a pause
        or a close is handed back unrun."""
        try:
            await asyncio.shield(recorded)
        except asyncio.CancelledError:
            return await self._cancelled(job)
        if self._closing or self._paused:
            self._slots.hold_back(entry_id, job, leased)
            self._spawn(self._held.give_back())  # never started: back as held jobs go
            return "handed-back"
        tracing = self._tracing
        return await (
            self._run(job, leased) if tracing is None else self._traced_run(tracing, job, leased)
        )

    async def _cancelled(self, job: Job[D, R]) -> str:
        """A try's task was cancelled: revoked, it fails for good; else (closing) the job
        stays in the PEL and deferActive hands it back, or (lost) another worker owns it."""
        self._job_ended(job)
        self._slots.wake()  # its slot is free: the fetch loop may be waiting for one
        if not self._closing and self._slots.take_revoked(job.id):
            return await self._fail(job, UnrecoverableError(_REASON_REVOKED), counted=True)
        return "handed-back"

    def _job_ended(self, job: Job[D, R]) -> None:
        """A job's outcome is known: its slot frees, and the oldest held job starts in it."""
        self._slots.end()
        self._slots.ran(job.entry_id)
        if self._slots.held_count and not (self._closing or self._paused):
            self._resume_held()

    def _spawn(self, call: Awaitable[None]) -> None:
        """Run a call to the server in the background; close waits for it."""
        self._intake.spawn(call)

    async def _fail_undecodable(self, job: Job[D, R], error: BaseException) -> None:
        self._job_ended(job)
        await self._fail(job, error, counted=True)

    async def _fail_counted(self, job: Job[D, R], error: BaseException) -> str:
        """Record a failed try of a job whose slot was already freed."""
        return await self._fail(job, error, counted=True)

    def _complete_later(self, job: Job[D, R], result: Any, rv: bytes) -> None:
        """Queue a success; completions of one loop iteration go out together."""
        self._job_ended(job)
        job.returnvalue = result
        keep = job_retention(job.opts, "removeOnComplete", self._keep_complete)
        self._intake.complete(job, rv, keep)

    # -- running --------------------------------------------------------------------------

    async def _traced_run(self, tracing: otel.JobTracing, job: Job[D, R], leased: float) -> str:
        run = functools.partial(self._run, leased=leased)
        return await tracing.process(job, run, sandbox=self._executor.sandboxed)

    async def _run(self, job: Job[D, R], leased: float) -> str:
        """Run one try of the job, taken under a lease that started at `leased`; returns its
        outcome (`completed`, `retry`, `failed`, ...) for the tracing, the only reader."""
        hold = self._hold
        # marks the run for the supervisor to read if the process dies, until its outcome
        # is known (glidemq/process/ledger.py)
        ledger, mark = run_ledger.current(), -1
        try:
            if self._link.pacer is not None or self._link.global_pacer is not None:
                await worker_limits.pace(self._link)
            if not self._lease.alive(leased):  # a freeze since the start was decided
                self._slots.hold_back(job.entry_id or "", job, leased)  # the server says
                self._revalidation.request()
                return "held"
            if self.events.listens("active"):
                self.events.emit("active", job)
            if job.expire_at is not None and self.connection.clock.now_ms() > job.expire_at:
                raise expired_error()
            if self._slots.take_revoked(job.id):
                raise UnrecoverableError(_REASON_REVOKED)  # revoked while it was held
            timeout = self._executor.timeout_of(job.opts.get("timeout"))
            if hold is None:
                result = await self._proc.job(job, timeout)
            else:
                # the start is confirmed to the server by the next call (glidemq/worker/starts.py)
                self._slots.began(job.entry_id)
                self._intake.confirm_soon()
                mark = ledger.begin(self.consumer, job.entry_id or "")
                # perf_counter: uvloop's loop.time() moves in whole milliseconds.
                began = perf_counter()
                try:
                    result = await self._proc.job(job, timeout)
                finally:
                    hold.timed(perf_counter() - began)
            rv = encode_result(result, self.opts.max_result_bytes, self._serializer)
        except asyncio.CancelledError:
            return await self._cancelled(job)
        except SandboxHandBack:
            self._job_ended(job)
            await self._defer([job])
            return "handed-back"
        except GeneratorExit:
            raise  # the coroutine is being closed unfinished (its loop went away): no await
        except BaseException as exc:
            return await self._raised(job, exc)
        finally:
            ledger.end(mark)
        if job.moved:
            self._job_ended(job)
            self._slots.finish(job.entry_id)
            return "moved"
        self._complete_later(job, result, rv)
        return "completed"

    async def _raised(self, job: Job[D, R], exc: BaseException) -> str:
        """The try ended by `exc` from the processor (or the checks before it)."""
        self._job_ended(job)
        if job.moved:  # move_to_delayed / move_to_failed already recorded where it went
            self._slots.finish(job.entry_id)
            return "moved"
        if isinstance(exc, DelayedError):
            exc = DelayedError("DelayedError without move_to_delayed")
        return await self._fail(job, exc, counted=True)

    # -- completing (glidemq.worker.intake sends the completions) ----------------------------------

    async def _defer(self, jobs: list[Job[D, R]]) -> None:
        """Put jobs this worker holds back in the queue unrun, without using an attempt."""
        assert self._ctx is not None
        args = [self.consumer]
        for job in jobs:
            args += [job.entry_id or "", job.id]
            self._slots.drop(job.entry_id)
        try:
            await wire.fetch.defer_active(self._ctx, self.consumer, args[1:])
        except DurabilityError as exc:
            self.events.emit("error", exc.naming([job.id for job in jobs]))
        except GlideMQError as exc:
            self.events.emit("error", exc)  # left in the PEL: stall recovery takes them
        self._slots.wake()

    async def _fail_now(self, job: Job[D, R], error: BaseException) -> None:
        """`Job.move_to_failed` from inside the processor."""
        await self._fail(job, error, counted=False)

    async def _fail(self, job: Job[D, R], error: BaseException, counted: bool) -> str:
        """Record a failed try; returns the engine's answer (`retry`, `failed`, `stale`, ...)."""
        assert self._ctx is not None
        if isinstance(error, RateLimitError):  # back to the queue, no attempt counted
            await worker_limits.hand_back(self._link, job, error, counted)
            return "rate-limited"
        recorded = asyncio.get_running_loop().create_future()
        self._failing[job.id] = recorded
        try:
            return await self._record_fail(job, error, counted)
        finally:
            if self._failing.get(job.id) is recorded:
                del self._failing[job.id]
            recorded.set_result(None)

    async def _record_fail(self, job: Job[D, R], error: BaseException, counted: bool) -> str:
        assert self._ctx is not None
        f = job_failure(job, error, self.opts, self._link.keep_fail, self.events)
        if job.entry_id:
            self._slots.finishing(job.entry_id)
        try:
            reply = await wire.fetch.fail(
                self._ctx,
                self.connection.clock.now_ms(),
                self._emit_flag,
                job.id,
                job.entry_id or "",
                f.reason,
                f.delay,
                f.keep,
                self.opts.dead_letter,
                f.stack,
            )
        except DurabilityError as exc:
            # Recorded on the primary, not confirmed: an error, never a silent success.
            self.events.emit("error", exc.naming([job.id]))
            reply = b"error"
        except GlideMQError as exc:
            # Left in the PEL: stall recovery will retry the job.
            self.events.emit("error", exc)
            reply = b"error"
        if counted:
            self._slots.drop(job.entry_id)
        status = reply.decode() if isinstance(reply, bytes) else str(reply)
        record_failure(self, job, error, f.reason, status)
        if status in ("retry", "failed"):
            self._link.report.failed(job, error, status, f.delay)
        if status == "stale":
            log.info("glidemq: job %s was reclaimed by another worker; failure dropped", job.id)
        if self._tracing is not None:
            self._tracing.failed(error, status, f.reason, f.delay)
        self._slots.wake()
        return status

    # -- aborting -------------------------------------------------------------------------

    async def rate_limit(self, ms: int) -> None:
        """Stop every worker of the queue from starting jobs for `ms` milliseconds (running
        jobs go on). From a processor, follow it with `raise Worker.RateLimitError()` to put
        the current job back without counting an attempt."""
        await worker_limits.rate_limit(self._link, ms)

    def abort_job(self, job_id: str) -> bool:
        """Cancel a job this worker is running; it fails with reason `revoked`."""
        return self._slots.abort(job_id, revoked=True)
