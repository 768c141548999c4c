"""Queue: the producer and administration side of one queue."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from glide import Batch, ClusterBatch, GlideClusterClient

from .connection import Client, ConnectionLike, close_client, create_client, resolve_connection
from .context import QueueContext, now_ms
from .errors import (
    GlideMQError,
    PayloadTooLargeError,
    ServerError,
    UnsupportedOptionError,
    ValidationError,
)
from .functions import ensure_library
from .job import Job
from .keys import DEFAULT_PREFIX, QueueKeys
from .serialize import encode_data
from .types import JobOptions, wire_opts

__all__ = ["JobCounts", "Queue"]

D = TypeVar("D")
R = TypeVar("R")

_STATES = ("waiting", "active", "delayed", "prioritized", "completed", "failed", "dead_letter")
_BULK_CHUNK = 1000  # most coalesced single adds in one FCALL
_BULK_PER_CALL = 250  # jobs per glidemq_addBulk call inside add_bulk
_PIPELINE_CALLS = 8  # calls per pipelined batch


@dataclass(frozen=True, slots=True)
class JobCounts:
    """How many jobs are in each state."""

    waiting: int
    active: int
    delayed: int
    prioritized: int
    completed: int
    failed: int
    dead_letter: int
    paused: bool

    def as_dict(self) -> dict[str, int]:
        """The counts by state name (without `paused`)."""
        return {s: getattr(self, s) for s in _STATES}


def _reply(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Queue(Generic[D, R]):
    """Add jobs to a queue and manage it.

    `Queue("emails", connection="valkey://localhost:6379")`; use it as `async with` or call
    `close()`. The connection is made on first use.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
    ) -> None:
        self.keys = QueueKeys(name, prefix)
        self.name = name
        self.connection = resolve_connection(connection)
        self.compression = compression
        self._client: Client | None = None
        self._ctx: QueueContext | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._adds: list[tuple[list[str | bytes], asyncio.Future[Any]]] = []
        self._add_scheduled = False
        self._add_tasks: set[asyncio.Task[None]] = set()

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
            raise GlideMQError(f"queue {self.name!r} is closed")
        async with self._lock:
            if self._ctx is None:
                client = await create_client(self.connection, name=f"glidemq-queue-{self.name}")
                try:
                    await ensure_library(client)
                except BaseException:
                    await close_client(client)
                    raise
                self._client = client
                self._ctx = QueueContext(client, self.keys, compress=self.compression)
        return self._ctx

    async def close(self) -> None:
        """Close the connection. Idempotent."""
        self._closed = True
        client, self._client, self._ctx = self._client, None, None
        await close_client(client)

    # -- adding ------------------------------------------------------------------------------

    def _compact(self, name: Any, data: Any, opts: JobOptions) -> list[str | bytes]:
        """The 8 per-job arguments of glidemq_addBulk."""
        if not isinstance(name, str):
            raise ValidationError("name", "must be a string")
        return [
            name,
            encode_data(data, compress=self.compression),
            wire_opts(opts),
            str(opts.delay),
            str(opts.priority),
            str(opts.attempts),
            str(opts.ttl),
            opts.job_id or "",
        ]

    def _dedup_args(self, name: str, data: Any, opts: JobOptions, now: int) -> list[str | bytes]:
        """glidemq_dedup's 20 arguments: dedup id, ttl, mode, then addJob's 17."""
        d = opts.deduplication
        assert d is not None
        return [
            d.id,
            str(d.ttl),
            d.mode,
            name,
            encode_data(data, compress=self.compression),
            wire_opts(opts),
            str(now),
            str(opts.delay),
            str(opts.priority),
            "",
            str(opts.attempts),
            "",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            str(opts.ttl),
            opts.job_id or "",
        ]

    def _added(
        self, reply: Any, name: str, data: Any, opts: JobOptions, now: int
    ) -> Job[D, R] | None:
        job_id = _reply(reply)
        if job_id in ("duplicate", "skipped"):
            return None
        if job_id.startswith("ERR:"):
            if job_id == "ERR:UNSUPPORTED_OPTION":
                raise UnsupportedOptionError("opts", "not supported by this library version")
            if job_id == "ERR:INVALID_JOB_ID":
                raise ValidationError("job_id", "rejected by the server")
            raise ServerError(f"add: {job_id}")
        assert self._ctx is not None
        return Job._created(
            self._ctx,
            job_id,
            name,
            data,
            opts.to_wire(),
            now,
            opts.delay,
            opts.priority,
            opts.attempts,
        )

    async def add(
        self, name: str, data: D | None = None, opts: JobOptions | Mapping[str, Any] | None = None
    ) -> Job[D, R] | None:
        """Add one job. Returns it, or None when a custom id or deduplication skipped it.

        Adds made in the same event-loop iteration share one round trip; each is still
        atomic on its own.
        """
        options = JobOptions.coerce(opts)
        ctx = await self._context()
        if options.deduplication is not None:
            now = now_ms()
            k = self.keys
            reply = await ctx.fcall(
                "glidemq_dedup",
                [k.dedup, k.id, k.stream, k.scheduled, k.events],
                self._dedup_args(name, data, options, now),
            )
            return self._added(reply, name, data, options, now)
        args = self._compact(name, data, options)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._adds.append((args, future))
        if not self._add_scheduled:
            self._add_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_adds)
        reply, now = await future
        return self._added(reply, name, data, options, now)

    def _flush_adds(self) -> None:
        self._add_scheduled = False
        pending, self._adds = self._adds, []
        loop = asyncio.get_running_loop()
        for start in range(0, len(pending), _BULK_CHUNK):
            task = loop.create_task(self._send_adds(pending[start : start + _BULK_CHUNK]))
            self._add_tasks.add(task)
            task.add_done_callback(self._add_tasks.discard)

    async def _send_adds(
        self, pending: list[tuple[list[str | bytes], asyncio.Future[Any]]]
    ) -> None:
        now = now_ms()
        args: list[str | bytes] = [str(now)]
        for job_args, _ in pending:
            args += job_args
        k = self.keys
        try:
            ctx = await self._context()
            replies = await ctx.fcall(
                "glidemq_addBulk", [k.id, k.stream, k.scheduled, k.events], args
            )
        except BaseException as exc:
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), reply in zip(pending, replies, strict=True):
            if not future.done():
                future.set_result((reply, now))

    async def add_bulk(
        self, jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]]
    ) -> list[Job[D, R] | None]:
        """Add many jobs, pipelined. Each item is `{"name", "data", "opts"}` or a tuple.

        Every job is validated before anything is sent. Each add is atomic on its own; the
        result list matches the input order (None where a job was skipped as a duplicate).
        """
        items: list[tuple[str, Any, JobOptions, list[str | bytes]]] = []
        now = now_ms()
        for i, item in enumerate(jobs):
            if isinstance(item, Mapping):
                unknown = set(item) - {"name", "data", "opts"}
                if unknown:
                    raise ValidationError(f"jobs[{i}]", f"unknown keys {sorted(unknown)}")
                name, data, raw_opts = item.get("name"), item.get("data"), item.get("opts")
            elif isinstance(item, tuple) and len(item) in (2, 3):
                name, data = item[0], item[1]
                raw_opts = item[2] if len(item) == 3 else None
            else:
                raise ValidationError(f"jobs[{i}]", "expected a mapping or (name, data[, opts])")
            try:
                if not isinstance(name, str):
                    raise ValidationError("name", "must be a string")
                options = JobOptions.coerce(raw_opts)
                if options.deduplication is not None:
                    args = self._dedup_args(name, data, options, now)
                else:
                    args = self._compact(name, data, options)
            except PayloadTooLargeError as exc:
                raise PayloadTooLargeError(exc.size, exc.limit, f"jobs[{i}].data") from None
            except ValidationError as exc:
                raise ValidationError(f"jobs[{i}].{exc.field}", exc.reason) from None
            items.append((name, data, options, args))
        ctx = await self._context()
        k = self.keys
        cluster = isinstance(ctx.client, GlideClusterClient)
        out: list[Job[D, R] | None] = []
        # Consecutive plain jobs share one FCALL; dedup jobs get their own. Up to
        # _PIPELINE_CALLS calls go out in one ordered pipeline.
        calls: list[tuple[str, list[str], list[str | bytes], list[int]]] = []
        plain: list[int] = []

        def close_plain() -> None:
            if plain:
                args: list[str | bytes] = [str(now)]
                for j in plain:
                    args += items[j][3]
                calls.append(
                    ("glidemq_addBulk", [k.id, k.stream, k.scheduled, k.events], args, list(plain))
                )
                plain.clear()

        for j, (_, _, options, _) in enumerate(items):
            if options.deduplication is None:
                plain.append(j)
                if len(plain) >= _BULK_PER_CALL:
                    close_plain()
            else:
                close_plain()
                calls.append(
                    (
                        "glidemq_dedup",
                        [k.dedup, k.id, k.stream, k.scheduled, k.events],
                        items[j][3],
                        [j],
                    )
                )
        close_plain()
        replies_by_job: list[Any] = [None] * len(items)
        for start in range(0, len(calls), _PIPELINE_CALLS):
            chunk = calls[start : start + _PIPELINE_CALLS]
            batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
            for function, keys, args, _ in chunk:
                batch.fcall(function, keys, args)
            replies = await ctx.command(ctx.client.exec(batch, False))  # type: ignore[arg-type,unused-ignore]
            for (function, _, _, idx), reply in zip(chunk, replies or [], strict=True):
                if isinstance(reply, Exception):
                    raise ServerError(f"add_bulk: {reply}")
                if function == "glidemq_addBulk":
                    for j, r in zip(idx, reply, strict=True):
                        replies_by_job[j] = r
                else:
                    replies_by_job[idx[0]] = reply
        for (name, data, options, _), reply in zip(items, replies_by_job, strict=True):
            out.append(self._added(reply, name, data, options, now))
        return out

    # -- reading -----------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> Job[D, R] | None:
        """The job with this id, or None."""
        ctx = await self._context()
        fields = await ctx.get_fields(job_id)
        return None if fields is None else Job(ctx, fields)

    async def _jobs_by_ids(self, ids: Sequence[str]) -> list[Job[D, R]]:
        ctx = await self._context()
        if not ids:
            return []
        cluster = isinstance(ctx.client, GlideClusterClient)
        batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
        for job_id in ids:
            batch.hgetall(self.keys.job(job_id))
        replies = await ctx.command(ctx.client.exec(batch, False))  # type: ignore[arg-type,unused-ignore]
        return [Job(ctx, h) for h in replies or [] if isinstance(h, dict) and h]

    async def get_jobs(
        self, states: str | Sequence[str] = ("waiting",), start: int = 0, end: int = -1
    ) -> list[Job[D, R]]:
        """Jobs in the given state(s), `start..end` inclusive within each state.

        Finished states list the newest first; the others in the order they will run.
        """
        wanted = [states] if isinstance(states, str) else list(states)
        ctx = await self._context()
        ids: list[str] = []
        for state in wanted:
            if state not in _STATES:
                raise ValidationError("states", f"unknown state {state!r}; one of {_STATES}")
            wire = "dlq" if state == "dead_letter" else state
            reply = await ctx.fcall(
                "glidemq_getJobIds",
                [self.keys.stream, self.keys.scheduled],
                [wire, str(start), str(end)],
            )
            ids += [_reply(x) for x in reply]
        return await self._jobs_by_ids(ids)

    async def get_job_counts(self) -> JobCounts:
        """Counts of jobs by state, read in one call."""
        ctx = await self._context()
        r = await ctx.fcall("glidemq_getCounts", [self.keys.stream, self.keys.scheduled], [])
        w, a, d, p, c, f, dl = (int(x) for x in r[:7])
        return JobCounts(w, a, d, p, c, f, dl, paused=bool(int(r[7])))

    async def count(self) -> int:
        """Jobs not yet started: waiting, prioritized and delayed."""
        c = await self.get_job_counts()
        return c.waiting + c.prioritized + c.delayed

    async def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1
    ) -> tuple[list[str], int]:
        """The job's log lines in `start..end` and the total number of lines."""
        ctx = await self._context()
        key = self.keys.log(job_id)
        lines = await ctx.command(ctx.client.lrange(key, start, end))
        total = await ctx.command(ctx.client.llen(key))
        return [x.decode() for x in lines], int(total)

    async def get_dead_letter_jobs(self, start: int = 0, end: int = -1) -> list[Job[D, R]]:
        """Jobs that failed for good while their worker had `dead_letter=True`, newest first."""
        return await self.get_jobs("dead_letter", start, end)

    # -- control -----------------------------------------------------------------------------

    async def pause(self) -> None:
        """Stop workers from taking new jobs (running jobs finish)."""
        ctx = await self._context()
        await ctx.fcall("glidemq_pause", [self.keys.meta, self.keys.events], [])

    async def resume(self) -> None:
        """Let workers take jobs again."""
        ctx = await self._context()
        await ctx.fcall("glidemq_resume", [self.keys.meta, self.keys.events], [])

    async def is_paused(self) -> bool:
        ctx = await self._context()
        return bool(await ctx.command(ctx.client.hget(self.keys.meta, "paused")) == b"1")

    async def remove(self, job_id: str) -> None:
        """Delete a job that is not running."""
        ctx = await self._context()
        await ctx.job_operation("glidemq_removeJob", job_id, op="remove")

    async def revoke(self, job_id: str) -> str:
        """Cancel a job: one not started fails at once with reason `revoked` ('revoked');
        a running one is flagged and aborted by its worker ('flagged')."""
        ctx = await self._context()
        return await ctx.job_operation("glidemq_revoke", job_id, str(now_ms()), op="revoke")

    async def retry_jobs(self, count: int = 1000, state: str = "failed") -> int:
        """Send up to `count` failed (or completed, dead_letter) jobs back to waiting."""
        source = {"failed": "failed", "completed": "completed", "dead_letter": "dlq"}.get(state)
        if source is None:
            raise ValidationError(
                "state", f"can retry failed, completed or dead_letter, not {state!r}"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValidationError("count", "must be a positive integer")
        ctx = await self._context()
        return await ctx.retry_jobs(source, count)

    async def drain(self, delayed: bool = False) -> int:
        """Remove every job waiting to run (and delayed ones too if `delayed`); running jobs
        are left alone. Returns how many were removed."""
        ctx = await self._context()
        cursor, removed = "-", 0
        while True:
            r = await ctx.fcall(
                "glidemq_drain", ctx.job_op_keys, [cursor, "1000", "1" if delayed else "0"]
            )
            removed += int(r[0])
            cursor = _reply(r[1])
            if cursor == "0":
                return removed

    async def clean(self, grace: int, limit: int = 1000, state: str = "completed") -> list[str]:
        """Remove up to `limit` jobs in `state` older than `grace` ms; returns their ids.

        States: completed, failed, dead_letter (by finish time); waiting, delayed, prioritized
        (by enqueue time).
        """
        allowed = ("completed", "failed", "dead_letter", "waiting", "delayed", "prioritized")
        if state not in allowed:
            raise ValidationError("state", f"must be one of {allowed}")
        for field, value in (("grace", grace), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(field, "must be an integer >= 0")
        ctx = await self._context()
        wire = "dlq" if state == "dead_letter" else state
        reply = await ctx.fcall(
            "glidemq_clean", ctx.job_op_keys, [wire, str(now_ms() - grace), str(limit)]
        )
        return [_reply(x) for x in reply]

    async def obliterate(self, force: bool = False) -> None:
        """Delete the queue and every job in it. Refused while jobs run unless `force`."""
        ctx = await self._context()
        cursor = "0"
        first = True
        while first or cursor != "0":
            reply = _reply(
                await ctx.fcall(
                    "glidemq_obliterate",
                    [self.keys.stream, self.keys.meta],
                    [cursor, "1" if force or not first else "0"],
                )
            )
            if reply == "ERR:ACTIVE":
                raise GlideMQError(
                    f"queue {self.name!r} has running jobs; close the workers or pass force=True"
                )
            cursor, first = reply, False
