"""Queue: the producer side of one queue (adding jobs, waiting for results, backpressure,
job schedulers) and its lifecycle; reading and maintenance come from `QueueAdmin`
(glidemq/admin/base.py), queue-wide limits from `QueueLimits` (glidemq/queue/limits.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, cast

from ..client import otel
from ..client.connection import Client, ConnectionLike, close_client, resolve_connection
from ..client.context import QueueContext
from ..client.functions import connect_with_library
from ..client.renewal import queue_renewal
from ..encoding.serialize import encode_data
from ..encoding.serializers import DEFAULT_SERIALIZER, get_serializer
from ..errors import (
    DurabilityError,
    PayloadTooLargeError,
    QueueClosedError,
    QueueFullError,
    ServerError,
    ValidationError,
)
from ..flows.budget import QueueBudget
from ..job.job import Job
from ..job.streams import QueueStreams
from ..keys import DEFAULT_PREFIX, QueueKeys, validate_job_name
from ..options.durability import DurabilityLike
from ..types import JobOptions, bulk_item
from ..wire import Call, adds, send
from ..wire.features import claim_serializer
from . import limits as queue_limits
from . import schedulers as scheduler
from .add_plan import plan_for
from .admin import JobCounts, QueueAdmin
from .groups import QueueGroups
from .limits import QueueLimits
from .request import ResultWaiter, default_result_ttl, validate_result_ttl
from .schedulers import JobScheduler, JobTemplate
from .suspend import QueueSuspend
from .usage import QueueUsage

__all__ = ["JobCounts", "Queue"]

D = TypeVar("D")
R = TypeVar("R")

_BULK_CHUNK = 1000  # most coalesced single adds in one FCALL
_BULKS_IN_FLIGHT = 8  # coalesced add calls sent and not answered yet, at most
CLOSE_TIMEOUT_S = 10.0
"""How long `Queue.close()` sends the adds it accepted before it fails the rest."""
# A flush that finds no other coalesced add in flight splits this many or more in two halves,
# so the client builds one call while the server runs the other (docs/BENCHMARKS.md).
_SPLIT_AT = 8
_BULK_PER_CALL = 250  # jobs per bulk-add call inside add_bulk
_PIPELINE_CALLS = 8  # calls per pipelined batch


def _lone_reply(call: Call, reply: Any) -> Any:
    """The addJob reply of a lone add: glidemq_add's whole reply, addBulk's first item."""
    return reply if call.function == adds.ADD.name else reply[0]


class Queue(
    QueueAdmin[D, R],
    QueueLimits,
    QueueUsage,
    QueueBudget,
    QueueStreams,
    QueueSuspend,
    QueueGroups[D, R],
    Generic[D, R],
):
    """Add jobs to a queue and manage it.

    `Queue("emails", connection="valkey://localhost:6379")`; use it as `async with` or call
    `close()`. The connection is made on first use. `result_ttl` (ms) is the default of
    `JobOptions.result_ttl` for jobs added through this Queue. `serializer` encodes job data:
    `"json"` (the default, readable by every language) or `"msgpack"` (Python only); it is
    recorded for the queue, and a Queue or Worker with another one is refused.
    `durability` ("replicated", "fsync" or a `Durability`) overrides the connection's: adds
    and every other write are acknowledged only once confirmed (docs/DURABILITY.md).
    """

    def __init__(
        self,
        name: str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        result_ttl: int | None = None,
        serializer: str = DEFAULT_SERIALIZER,
        durability: DurabilityLike = None,
    ) -> None:
        self.keys = QueueKeys(name, prefix)
        self._serializer = get_serializer(serializer)
        self.serializer = serializer
        self.result_ttl = validate_result_ttl(result_ttl)
        self._results: ResultWaiter | None = None
        self.name = name
        self.connection = resolve_connection(connection).with_durability(durability)
        self.compression = compression
        self._client: Client | None = None
        self._ctx: QueueContext | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._closing = False  # close() began: no new add; those accepted are still sent
        self._adds: list[tuple[list[str | bytes], asyncio.Future[Any]]] = []
        self._add_scheduled = False
        self._add_in_flight = False  # a lone add is being sent by its own caller
        self._bulks_in_flight = 0  # coalesced adds being sent or waiting to (_send_adds)
        self._bulk_gate: asyncio.Semaphore | None = None  # _BULKS_IN_FLIGHT calls at once
        self._sending = 0  # adds accepted and not answered yet, outside _add_tasks
        self._quiet: asyncio.Event | None = None  # set by close(): woken as adds finish
        self._add_tasks: set[asyncio.Task[None]] = set()
        self._confirmed_adds: asyncio.Lock | None = None  # durability: one shared call at a time
        self._blocking: Client | None = None  # blocking stream reads (glidemq/job/streams.py)
        self._blocking_lock: asyncio.Lock | None = None
        # Asked once: None (OpenTelemetry absent or no provider) adds no span and no field.
        self._tracing = otel.job_tracing()

    async def __aenter__(self) -> Self:
        await self._context()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _context(self) -> QueueContext:
        if self._ctx is not None:
            return self._ctx
        if self._closed:
            raise QueueClosedError(self.name)
        async with self._lock:
            if self._ctx is None:
                client = await connect_with_library(
                    self.connection, name=f"glidemq-queue-{self.name}"
                )
                self._client = client
                ctx = QueueContext(
                    client,
                    self.keys,
                    compress=self.compression,
                    retry=self.connection.retry,
                    serializer=self._serializer,
                    clock=self.connection.clock,
                    durability=self.connection.confirmation,
                    request_timeout_ms=self.connection.request_timeout_ms,
                    where=self.connection.where,
                )
                try:
                    await claim_serializer(ctx, self.serializer, "Queue")
                except BaseException:
                    self._client = None
                    await close_client(client)
                    raise
                self._ctx = ctx
                queue_renewal(self._ctx, self.connection, f"glidemq-queue-{self.name}")
        return self._ctx

    async def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Close the connection. Idempotent. Adds already accepted (awaited by their callers)
        are sent first, for at most `timeout` seconds (None: until they are); those still not
        sent then fail with QueueClosedError (nothing of them is written), and new calls
        raise QueueClosedError at once."""
        if not self._closing:
            self._closing = True
            await self._send_accepted(timeout)
        self._closed = True
        for _, future in self._adds:  # accepted, never taken by a flush
            if not future.done():
                future.set_exception(QueueClosedError(self.name, "the add was not sent"))
        self._adds = []
        if self._results is not None:
            await self._results.close()
        await self._close_streams()
        ctx, client, self._client, self._ctx = self._ctx, self._client, None, None
        if ctx is not None:
            client = ctx.client  # a renewed connection replaced the first client
        await close_client(client)
        # batches still waiting for their turn fail at once now; their callers hear it here
        await asyncio.gather(*list(self._add_tasks), return_exceptions=True)

    def _adds_under_way(self) -> bool:
        return bool(self._sending or self._adds or self._add_tasks)

    async def _send_accepted(self, timeout: float | None) -> None:
        """Wait until every accepted add was answered, or `timeout` ran out."""
        if not self._adds_under_way():
            return
        quiet = self._quiet = asyncio.Event()

        async def settled() -> None:
            while self._adds_under_way():
                quiet.clear()
                await quiet.wait()

        try:
            await asyncio.wait_for(settled(), timeout)
        except TimeoutError:
            pass
        finally:
            self._quiet = None

    def _add_done(self) -> None:
        """One accepted add (or batch of them) was answered: wake a waiting close()."""
        if self._quiet is not None:
            self._quiet.set()

    # -- adding ------------------------------------------------------------------------------

    def _opts_json(self, opts: JobOptions, traceparent: str | None) -> bytes:
        """The job's stored options, with the producer's trace context when there is one."""
        raw = plan_for(opts).json
        return otel.stamp_opts(raw, traceparent) if traceparent else raw

    def _compact(
        self, name: Any, data: Any, opts: JobOptions, traceparent: str | None
    ) -> list[str | bytes]:
        """One job for a bulk add (`glidemq.wire.adds.bulk_job`)."""
        validate_job_name(name)
        encoded = encode_data(data, compress=self.compression, serializer=self._serializer)
        header = plan_for(opts).header
        if traceparent:
            header = (otel.stamp_opts(header[0], traceparent), *header[1:])  # type: ignore[arg-type]
        return adds.bulk_job(name, header, encoded)

    def _dedup_call(
        self, name: str, data: Any, opts: JobOptions, now: int, traceparent: str | None
    ) -> Call:
        """The deduplicated add of one job."""
        d = opts.deduplication
        assert d is not None
        validate_job_name(name)
        encoded = encode_data(data, compress=self.compression, serializer=self._serializer)
        opts_json = self._opts_json(opts, traceparent)
        args = adds.job_args(name, encoded, opts_json, now, opts, opts.job_id)
        return adds.dedup_call(self.keys, d.id, d.ttl, d.mode, args)

    def _added(
        self, ctx: QueueContext, reply: Any, name: str, data: Any, opts: JobOptions, now: int
    ) -> Job[D, R] | None:
        """The Job an answered add made; `ctx` is the connection it went out on (close()
        may have dropped the queue's own since)."""
        job_id = adds.added_id(reply, self.name, opts)
        if job_id is None:
            return None
        return Job.created(
            ctx,
            job_id,
            name,
            data,
            plan_for(opts).stored(),
            now,
            opts.delay,
            opts.priority,
            opts.attempts,
        )

    async def add(
        self, name: str, data: D | None = None, opts: JobOptions | Mapping[str, Any] | None = None
    ) -> Job[D, R] | None:
        """Add one job. Returns it, or None when a custom id or deduplication skipped it.

        An add made while no other is under way is sent at once; adds made while one is in
        flight are collected per event-loop iteration and share one round trip. Each is
        still atomic on its own.
        """
        tracing = self._tracing
        if tracing is None:
            return await self._add(name, data, opts, None)
        with tracing.producer("add", self.name, **{"glidemq.job.name": str(name)}) as span:
            job = await self._add(name, data, opts, tracing.traceparent())
            if job is not None:
                span.set_attribute("messaging.message.id", job.id)
            return job

    async def _add(
        self,
        name: str,
        data: D | None,
        opts: JobOptions | Mapping[str, Any] | None,
        traceparent: str | None,
    ) -> Job[D, R] | None:
        options = default_result_ttl(JobOptions.coerce(opts), self.result_ttl)
        if self._closing:
            raise QueueClosedError(self.name)
        ctx = self._ctx if self._ctx is not None else await self._context()
        if options.deduplication is not None:
            now = self.connection.clock.now_ms()
            self._sending += 1
            try:
                reply = await send(ctx, self._dedup_call(name, data, options, now, traceparent))
            except DurabilityError as exc:
                raise exc.naming(adds.written_ids([exc.reply])) from None
            finally:
                self._sending -= 1
                self._add_done()
            return self._added(ctx, reply, name, data, options, now)
        if not (self._add_in_flight or self._add_scheduled or self._bulks_in_flight):
            # No other add under way: send this one now, from this task. A lone add then
            # costs what the client's call costs, with no hop through another task.
            self._add_in_flight = True
            self._sending += 1
            try:
                now = self.connection.clock.now_ms()
                call = self._lone_add_call(name, data, options, traceparent, now)
                reply = _lone_reply(call, await send(ctx, call))
            except DurabilityError as exc:
                written = adds.written_ids([_lone_reply(call, exc.reply)])
                raise exc.naming(written) from None
            finally:
                self._add_in_flight = False
                self._sending -= 1
                self._add_done()
            return self._added(ctx, reply, name, data, options, now)
        args = self._compact(name, data, options, traceparent)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._adds.append((args, future))
        if not self._add_scheduled:
            # The task's first step runs in the next loop iteration and takes every add made
            # until then: adds made meanwhile share one call.
            self._add_scheduled = True
            self._start_add_task(loop, self._flush_adds())
        reply, now, sent_on = await future
        return self._added(sent_on, reply, name, data, options, now)

    def plain_add_call(
        self, name: str, data: D | None, opts: JobOptions | Mapping[str, Any] | None
    ) -> tuple[Call, JobOptions, int] | None:
        """The FCALL of one add, the job's options and its time, for a caller that sends
        it on a client of its own (the sync API's); None when the add must go through
        `add`: deduplicated, traced, on a memory server, with durability, or before the
        first connect."""
        options = default_result_ttl(JobOptions.coerce(opts), self.result_ttl)
        if (
            options.deduplication is not None
            or self._tracing is not None
            or self._ctx is None
            or self.connection.backend is not None
            or self.connection.durability is not None  # the wait goes with the async path
        ):
            return None
        now = self.connection.clock.now_ms()
        return self._lone_add_call(name, data, options, None, now), options, now

    def plain_add_done(
        self, call: Call, reply: Any, name: str, data: D | None, options: JobOptions, now: int
    ) -> Job[D, R] | None:
        """The Job a `plain_add_call` made, from the call's reply."""
        ctx = self._ctx
        assert ctx is not None  # plain_add_call gave a call: the queue was connected
        return self._added(ctx, _lone_reply(call, reply), name, data, options, now)

    def _lone_add_call(
        self, name: Any, data: Any, options: JobOptions, traceparent: str | None, now: int
    ) -> Call:
        """One add on its own: glidemq_add for a plain job (the server's cheapest add),
        else a one-job glidemq_addBulk."""
        plan = plan_for(options)
        if plan.plain:
            validate_job_name(name)
            encoded = encode_data(data, compress=self.compression, serializer=self._serializer)
            opts_json = self._opts_json(options, traceparent)
            return adds.add_call(self.keys, now, name, opts_json, encoded, plan.attempts)
        args = self._compact(name, data, options, traceparent)
        return adds.add_bulk_call(self.keys, now, [args], safe=bool(args[6]))

    def _start_add_task(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
    ) -> None:
        task = loop.create_task(coro)
        self._add_tasks.add(task)
        task.add_done_callback(self._add_task_done)

    def _add_task_done(self, task: asyncio.Task[None]) -> None:
        self._add_tasks.discard(task)
        self._add_done()

    async def _flush_adds(self) -> None:
        if self.connection.durability is not None:
            await self._flush_adds_confirmed()
            return
        self._add_scheduled = False
        pending, self._adds = self._adds, []
        chunk = _BULK_CHUNK
        if not self._bulks_in_flight and len(pending) >= _SPLIT_AT:
            chunk = min(chunk, -(-len(pending) // 2))
        if len(pending) > chunk:  # further chunks go out side by side
            loop = asyncio.get_running_loop()
            for start in range(chunk, len(pending), chunk):
                self._start_add_task(loop, self._send_adds(pending[start : start + chunk]))
            pending = pending[:chunk]
        await self._send_adds(pending)

    async def _flush_adds_confirmed(self) -> None:
        """With durability each call's wait holds the connection, and adds sent meanwhile
        would only queue behind it: they wait for the call in flight and go out together,
        one call and one wait."""
        if self._confirmed_adds is None:
            self._confirmed_adds = asyncio.Lock()
        async with self._confirmed_adds:
            self._add_scheduled = False
            pending, self._adds = self._adds, []
            for start in range(0, len(pending), _BULK_CHUNK):
                await self._send_adds(pending[start : start + _BULK_CHUNK])

    async def _send_adds(
        self, pending: list[tuple[list[str | bytes], asyncio.Future[Any]]]
    ) -> None:
        self._bulks_in_flight += 1
        if self._bulk_gate is None:
            self._bulk_gate = asyncio.Semaphore(_BULKS_IN_FLIGHT)
        try:
            async with self._bulk_gate:
                if self._closed:  # close() ran out of time before this batch's turn
                    raise QueueClosedError(self.name, "the add was not sent")
                now = self.connection.clock.now_ms()
                jobs = [job for job, _ in pending]
                ctx = await self._context()
                # Item 7 of each job is its custom id: with one everywhere, a resend is harmless.
                call = adds.add_bulk_call(self.keys, now, jobs, safe=all(job[6] for job in jobs))
                replies = await send(ctx, call)
        except DurabilityError as exc:
            # each caller hears of its own job: written, not confirmed
            got = exc.reply if isinstance(exc.reply, list) else []
            for i, (_, future) in enumerate(pending):
                if not future.done():
                    job = got[i] if i < len(got) else None
                    future.set_exception(exc.naming(adds.written_ids([job])))
            return
        except BaseException as exc:
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._bulks_in_flight -= 1
        for (_, future), reply in zip(pending, replies, strict=True):
            if not future.done():
                future.set_result((reply, now, ctx))

    async def add_bulk(
        self, jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]]
    ) -> list[Job[D, R] | None]:
        """Add many jobs, pipelined. Each item is `{"name", "data", "opts"}` or a tuple.

        Every job is validated before anything is sent. Each add is atomic on its own; the
        result list matches the input order (None where a job was skipped as a duplicate).
        """
        tracing = self._tracing
        if tracing is None:
            return await self._add_bulk(jobs, None)
        with tracing.producer("add_bulk", self.name) as span:
            added = await self._add_bulk(jobs, tracing.traceparent())
            span.set_attribute("messaging.batch.message_count", len(added))
            return added

    async def _add_bulk(
        self,
        jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]],
        traceparent: str | None,
    ) -> list[Job[D, R] | None]:
        if self._closing:
            raise QueueClosedError(self.name)
        now = self.connection.clock.now_ms()
        items = self._bulk_items(jobs, now, traceparent)
        ctx = await self._context()
        self._sending += 1
        try:
            replies = await _send_bulk(ctx, items, _bulk_calls(self.keys, items, now))
        finally:
            self._sending -= 1
            self._add_done()
        refused = queue_limits.refused_items(replies)
        out: list[Job[D, R] | None] = []
        for (name, data, options, _), reply in zip(items, replies, strict=True):
            if refused and (reply is None or queue_limits.is_full(reply)):
                out.append(None)
            else:
                out.append(self._added(ctx, reply, name, data, options, now))
        if refused:
            raise QueueFullError(self.name, out, refused)
        return out

    def _bulk_items(
        self,
        jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]],
        now: int,
        traceparent: str | None,
    ) -> list[_BulkItem]:
        """Each job checked, with its bulk-add form, or its own call when it is deduplicated;
        errors name the job (`jobs[3].delay`)."""
        items: list[_BulkItem] = []
        for i, item in enumerate(jobs):
            name, data, raw_opts = bulk_item(i, item)
            try:
                validate_job_name(name)
                options = default_result_ttl(JobOptions.coerce(raw_opts), self.result_ttl)
                # one trace context for the whole bulk: runs of like jobs stay shared
                payload: list[str | bytes] | Call
                if options.deduplication is not None:
                    payload = self._dedup_call(name, data, options, now, traceparent)
                else:
                    payload = self._compact(name, data, options, traceparent)
            except PayloadTooLargeError as exc:
                raise PayloadTooLargeError(exc.size, exc.limit, f"jobs[{i}].data") from None
            except ValidationError as exc:
                raise ValidationError(f"jobs[{i}].{exc.field}", exc.reason) from None
            items.append((name, data, options, payload))
        return items

    async def add_and_wait(
        self,
        name: str,
        data: D | None = None,
        opts: JobOptions | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = 30.0,
    ) -> R:
        """Add a job and wait until it finished: return its return value, or raise
        JobFailedError when it failed for good, JobTimeoutError after `timeout` seconds (the
        job is left alone). A custom `job_id` that exists waits for (or returns the outcome
        of) that job instead of adding one. See docs/ADVANCED.md.
        """
        if self._results is None:
            self._results = ResultWaiter(self, self._context)
        result: R = await self._results.add_and_wait(name, data, opts, timeout)
        return result

    async def set_max_waiting(self, limit: int | None) -> None:
        """Refuse new jobs with QueueFullError while `limit` jobs have not started yet
        (`count()`: waiting + prioritized + delayed, LIFO and jobs held back by their group
        included); None removes the limit. Shared by all producers."""
        await queue_limits.set_max_waiting(await self._context(), limit)

    async def get_max_waiting(self) -> int | None:
        """The queue's limit set by `set_max_waiting`, or None."""
        return await queue_limits.get_max_waiting(await self._context())

    async def set_max_waiting_per_key(self, limit: int | None) -> None:
        """Refuse new jobs of an ordering or group key with QueueFullError while `limit` jobs
        of that key have not started yet; other keys go on. None removes the limit."""
        await queue_limits.set_max_waiting_per_key(await self._context(), limit)

    async def get_max_waiting_per_key(self) -> int | None:
        """The per-key limit set by `set_max_waiting_per_key`, or None."""
        return await queue_limits.get_max_waiting_per_key(await self._context())

    # -- job schedulers (glidemq/queue/schedulers.py) ---------------------------------------

    async def upsert_job_scheduler(
        self,
        name: str,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        tz: str | None = None,
        start_date: int | datetime | None = None,
        end_date: int | datetime | None = None,
        limit: int | None = None,
        template: JobTemplate | Mapping[str, Any] | None = None,
        repeat_after_complete: bool = False,
    ) -> JobScheduler:
        """Create or replace the scheduler `name`: running workers add a job from `template`
        (name, data, opts) on the `cron` expression (in time zone `tz`) or every `every_ms`,
        from `start_date` until `end_date` or `limit` jobs. Replacing it keeps its next run
        when the schedule is unchanged. With `repeat_after_complete` the next run is planned
        when the previous run's job finished, so runs never overlap. Returns the stored
        scheduler."""
        new = scheduler.build(
            name,
            cron=cron,
            every_ms=every_ms,
            tz=tz,
            start_date=start_date,
            end_date=end_date,
            limit=limit,
            template=template,
            compress=self.compression,
            repeat_after_complete=repeat_after_complete,
        )
        return await scheduler.upsert(await self._context(), new, self.connection.clock.now_ms())

    async def get_job_scheduler(self, name: str) -> JobScheduler | None:
        """The scheduler `name`, or None."""
        return await scheduler.get(await self._context(), name)

    async def get_job_schedulers(self) -> list[JobScheduler]:
        """Every scheduler of the queue, the next to run first."""
        return await scheduler.get_all(await self._context())

    async def remove_job_scheduler(self, name: str) -> bool:
        """Delete the scheduler `name` (jobs it already added stay); False if there was none."""
        return await scheduler.remove(await self._context(), name)


_BulkItem = tuple[str, Any, JobOptions, "list[str | bytes] | Call"]
"""One job of an add_bulk: name, data, options, and its compact form or its own call."""


def _bulk_calls(keys: QueueKeys, items: list[_BulkItem], now: int) -> list[tuple[Call, list[int]]]:
    """The calls of an add_bulk, each with the indexes of its jobs: consecutive plain jobs
    share one bulk call (up to _BULK_PER_CALL), a deduplicated job gets its own."""
    calls: list[tuple[Call, list[int]]] = []
    plain: list[int] = []

    def close_plain() -> None:
        if plain:
            bulk = [cast("list[str | bytes]", items[j][3]) for j in plain]
            calls.append((adds.add_bulk_call(keys, now, bulk), list(plain)))
            plain.clear()

    for j, (_, _, _, payload) in enumerate(items):
        if isinstance(payload, Call):
            close_plain()
            calls.append((payload, [j]))
        else:
            plain.append(j)
            if len(plain) >= _BULK_PER_CALL:
                close_plain()
    close_plain()
    return calls


def _written_in(chunk: list[tuple[Call, list[int]]], replies: Any) -> list[str]:
    """The ids of the jobs a pipeline of add calls wrote, from its replies."""
    per_job: list[Any] = []
    for (call, _), reply in zip(chunk, replies if isinstance(replies, list) else [], strict=False):
        if call.function == adds.ADD_BULK.name and isinstance(reply, list):
            per_job.extend(reply)
        else:
            per_job.append(reply)
    return adds.written_ids(per_job)


async def _send_bulk(
    ctx: QueueContext, items: list[_BulkItem], calls: list[tuple[Call, list[int]]]
) -> list[Any]:
    """Send the calls, up to _PIPELINE_CALLS in one ordered pipeline; each job's reply (None
    for the jobs never sent because the queue was full)."""
    replies_by_job: list[Any] = [None] * len(items)
    for start in range(0, len(calls), _PIPELINE_CALLS):
        chunk = calls[start : start + _PIPELINE_CALLS]
        # Resent after a time-out only when every job has a custom or deduplication id.
        safe = all(items[j][2].job_id or items[j][2].deduplication for c in chunk for j in c[1])
        # A call answered MOVED / TRYAGAIN / CLUSTERDOWN did not run: it is sent again.
        try:
            replies = await ctx.pipeline([c for c, _ in chunk], safe=safe)
        except DurabilityError as exc:
            # the jobs of earlier pipelines were confirmed; these were written, not confirmed
            raise exc.naming(_written_in(chunk, exc.reply)) from None
        for (call, idx), reply in zip(chunk, replies, strict=True):
            if isinstance(reply, Exception):
                raise ServerError(f"add_bulk: {reply}")
            if call.function == adds.ADD_BULK.name:
                for j, r in zip(idx, reply, strict=True):
                    replies_by_job[j] = r
            else:
                replies_by_job[idx[0]] = reply
        if any(queue_limits.is_queue_full(replies_by_job[j]) for c in chunk for j in c[1]):
            break  # the queue is full: send nothing more (a full key stops only its jobs)
    return replies_by_job
