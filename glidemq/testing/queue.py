"""TestQueue: the Queue API on an in-memory queue, for unit tests without Valkey."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from ..errors import (
    GlideMQError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    PayloadTooLargeError,
    QueueFullError,
    ValidationError,
)
from ..flowview import DEFAULT_MAX_FLOW_NODES, Flow
from ..job import retry_source
from ..keys import DEFAULT_PREFIX, QueueKeys
from ..limit_options import RateLimit
from ..queries import Metrics, WorkerInfo, ascii_lower
from ..queue import JobCounts, Queue
from ..queue_admin import JOB_STATES
from ..request import default_result_ttl, validate_result_ttl
from ..serialize import decode_json, encode_data
from ..serializers import DEFAULT_SERIALIZER, get_serializer
from ..types import JobOptions, bulk_item
from . import bulk, flows, limits
from .bulk import redis_range
from .features import AiFeatureMethods
from .job import TestJob, check_reply
from .schedulers import SchedulerMethods
from .server import MemoryConnection, MemoryServer, resolve_server
from .store import QueueStore
from .support import UNSUPPORTED_QUEUE_METHODS, check_options, install_unsupported

__all__ = ["TestQueue"]

D = TypeVar("D")
R = TypeVar("R")

_STATES = JOB_STATES
_CLEANABLE = ("completed", "failed", "dead_letter", "waiting", "delayed", "prioritized")


_SEARCH_STATES = (
    "waiting",
    "active",
    "prioritized",
    "delayed",
    "completed",
    "failed",
    "dead_letter",
)
_MAX_STARS = 8
_METRICS_MINUTES = 1440


def _check_data_filter(data: Mapping[str, Any] | None) -> None:
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise ValidationError("data", "must be a mapping of top-level field -> value")
    for key, value in data.items():
        if not isinstance(key, str) or not key:
            raise ValidationError("data", f"field names must be non-empty strings, got {key!r}")
        if value is not None and not isinstance(value, bool | int | float | str):
            raise ValidationError(f"data.{key}", "must be a string, a number, a bool or None")


def _wire_state(state: str) -> str:
    return "dlq" if state == "dead_letter" else state


class _KeyFull(QueueFullError):
    """A refusal by the per-key limit: other keys of the same add_bulk still go on."""


class TestQueue(SchedulerMethods, AiFeatureMethods, Generic[D, R]):
    """A Queue held in memory: same methods, options, errors and job states as
    `glidemq.Queue`, no server.

    Queues and workers given the same `connection` (a MemoryServer; None is a shared
    default one) and name see the same jobs.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        name: str,
        *,
        connection: MemoryConnection = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        result_ttl: int | None = None,
        serializer: str = DEFAULT_SERIALIZER,
    ) -> None:
        self.keys = QueueKeys(name, prefix)  # the same name and prefix rules as Queue
        self.name = name
        self.server: MemoryServer = resolve_server(connection)
        self.connection = self.server
        self.compression = compression
        self.result_ttl = validate_result_ttl(result_ttl)
        self._serializer = get_serializer(serializer)
        self.serializer = serializer
        self._closed = False

    async def __aenter__(self) -> Self:
        self._store()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _store(self) -> QueueStore:
        if self._closed:
            raise GlideMQError(f"queue {self.name!r} is closed")
        store = self.server.store(self.name, self.keys.prefix)
        store.claim_serializer(self.serializer, "Queue")
        return store

    async def _ready(self) -> QueueStore:
        # Every real call goes to the server and back: yield to the loop like it does, so
        # a test that polls the queue never starves its workers.
        await asyncio.sleep(0)
        return self._store()

    async def close(self) -> None:
        """Close the queue. Idempotent."""
        self._closed = True

    # -- adding ------------------------------------------------------------------------------

    def _add_now(self, store: QueueStore, name: str, data: Any, opts: JobOptions, now: int) -> Any:
        if not isinstance(name, str):
            raise ValidationError("name", "must be a string")
        raw = encode_data(data, compress=self.compression, serializer=self._serializer)
        d = opts.deduplication
        if d is not None:
            verdict = store.dedup_check(d.id, d.ttl, d.mode, now, limits.room(store))
            if verdict == "skipped":
                return None
            if verdict == "full":
                raise QueueFullError(self.name)
        left = limits.room(store)
        if left is not None and left <= 0:
            raise QueueFullError(self.name)
        if limits.key_full(store, opts):
            raise _KeyFull(self.name)
        job_id = store.add(name, raw, opts, now)
        if job_id == "duplicate":
            return None
        if d is not None:
            store.dedup[d.id] = (job_id, now)
        job = TestJob.from_record(store, store.jobs[job_id])
        job.data = data
        return job

    async def add(
        self, name: str, data: D | None = None, opts: JobOptions | Mapping[str, Any] | None = None
    ) -> TestJob[D, R] | None:
        """Add one job. Returns it, or None when a custom id or deduplication skipped it."""
        options = default_result_ttl(JobOptions.coerce(opts), self.result_ttl)
        check_options(options)
        store = await self._ready()
        job: TestJob[D, R] | None = self._add_now(store, name, data, options, store.clock.now_ms())
        return job

    async def add_bulk(
        self, jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]]
    ) -> list[TestJob[D, R] | None]:
        """Add many jobs. Each item is `{"name", "data", "opts"}` or a tuple.

        Every job is validated before anything is added; the result list matches the input
        order (None where a job was skipped as a duplicate).
        """
        items: list[tuple[str, Any, JobOptions]] = []
        for i, item in enumerate(jobs):
            name, data, raw_opts = bulk_item(i, item)
            try:
                if not isinstance(name, str):
                    raise ValidationError("name", "must be a string")
                options = default_result_ttl(JobOptions.coerce(raw_opts), self.result_ttl)
                check_options(options)
                encode_data(data, compress=self.compression, serializer=self._serializer)
            except PayloadTooLargeError as exc:
                raise PayloadTooLargeError(exc.size, exc.limit, f"jobs[{i}].data") from None
            except ValidationError as exc:
                raise ValidationError(f"jobs[{i}].{exc.field}", exc.reason) from None
            items.append((name, data, options))
        store = await self._ready()
        now = store.clock.now_ms()
        out: list[TestJob[D, R] | None] = []
        refused: list[int] = []
        stopped = False
        for i, (name, data, options) in enumerate(items):
            if stopped:  # after the queue was full nothing more is sent
                out.append(None)
                refused.append(i)
                continue
            try:
                out.append(self._add_now(store, name, data, options, now))
            except QueueFullError as exc:
                out.append(None)
                refused.append(i)
                stopped = not isinstance(exc, _KeyFull)  # a full key refuses only its jobs
        if refused:
            raise QueueFullError(self.name, out, refused)
        return out

    async def add_and_wait(
        self,
        name: str,
        data: D | None = None,
        opts: JobOptions | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = 30.0,
    ) -> R:
        """Add a job and wait until it finished: return its return value, or raise
        JobFailedError when it failed for good, JobTimeoutError after `timeout` seconds (real
        time; the job is left alone). A custom `job_id` that exists waits for (or returns the
        outcome of) that job instead of adding one."""
        options = JobOptions.coerce(opts)
        check_options(options)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ValidationError("timeout", f"must be seconds > 0 or None, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        store = await self._ready()
        job = await self.add(name, data, options)
        job_id = job.id if job is not None else self._existing_id(store, options)
        store.watched[job_id] = store.watched.get(job_id, 0) + 1
        try:
            while True:
                if self._closed:
                    raise GlideMQError(f"queue {self.name!r} is closed")
                rec = (
                    store.outcomes.get(job_id)
                    or store.jobs.get(job_id)
                    or store.cached_result(job_id)
                )
                if rec is None:
                    raise JobNotFoundError(self.name, job_id)
                if rec.state == "completed":
                    value: R = decode_json(rec.returnvalue)
                    return value
                if rec.state == "failed":
                    raise JobFailedError(self.name, job_id, rec.failed_reason, rec.stacktrace)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise JobTimeoutError(
                        f"job {job_id!r} of queue {self.name!r} did not finish within {timeout} s"
                    )
                await store.changed(0.05 if left is None else min(left, 0.05))
        finally:
            left_waiting = store.watched.get(job_id, 1) - 1  # obliterate may have reset it
            if left_waiting > 0:
                store.watched[job_id] = left_waiting
            else:
                store.watched.pop(job_id, None)
                store.outcomes.pop(job_id, None)

    @staticmethod
    def _existing_id(store: QueueStore, options: JobOptions) -> str:
        """The id of the job an add was skipped for: its custom id, or its dedup owner."""
        if options.job_id is not None:
            return options.job_id
        d = options.deduplication
        if d is not None and d.id in store.dedup:
            return store.dedup[d.id][0]
        raise GlideMQError("add_and_wait: the add was skipped and no existing job is known")

    async def set_max_waiting(self, limit: int | None) -> None:
        """Refuse new jobs with QueueFullError while `limit` jobs have not started yet
        (waiting + prioritized + delayed); None removes the limit."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValidationError("max_waiting", f"must be an integer >= 0 or None, got {limit!r}")
        (await self._ready()).max_waiting = limit

    async def get_max_waiting(self) -> int | None:
        """The queue's limit set by `set_max_waiting`, or None."""
        return (await self._ready()).max_waiting

    async def set_max_waiting_per_key(self, limit: int | None) -> None:
        """Refuse new jobs of an ordering or group key with QueueFullError while `limit` jobs
        of that key have not started yet; other keys go on. None removes the limit."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValidationError(
                "max_waiting_per_key", f"must be an integer >= 0 or None, got {limit!r}"
            )
        (await self._ready()).max_waiting_per_key = limit

    async def get_max_waiting_per_key(self) -> int | None:
        """The per-key limit set by `set_max_waiting_per_key`, or None."""
        return (await self._ready()).max_waiting_per_key

    async def settle(self, timeout: float = 10.0) -> None:
        """Return once nothing runs and nothing could start now (testing only).

        With a ManualClock: `clock.advance(ms)` then `await queue.settle()` runs everything
        that became due. Raises JobTimeoutError after `timeout` seconds of real time (a
        processor that waits for something that never happens).
        """
        store = await self._ready()
        deadline = time.monotonic() + timeout
        while not limits.idle(store, store.clock.now_ms()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeoutError(f"queue {self.name!r} still busy after {timeout} s")
            await store.changed(min(left, 0.05))
        await asyncio.sleep(0)

    # -- reading -----------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> TestJob[D, R] | None:
        """The job with this id, or None."""
        store = await self._ready()
        rec = store.jobs.get(job_id)
        return None if rec is None else TestJob.from_record(store, rec)

    async def get_flow(
        self, job_id: str, *, max_nodes: int = DEFAULT_MAX_FLOW_NODES
    ) -> Flow | None:
        """The flow below this job (pass a root's id for a whole flow): a tree of
        `FlowNode`s with each job's state, result and children, and the same jobs as a DAG
        (`nodes`, `edges`). None when the job does not exist. Reads at most `max_nodes` jobs."""
        return await flows.read_flow(await self._ready(), job_id, max_nodes)

    async def get_result(self, job_id: str) -> R | None:
        """A completed job's return value: from its record, or from the result cache
        (`result_ttl`) once the record is gone; None otherwise."""
        store = await self._ready()
        rec = store.jobs.get(job_id)
        if rec is None:
            rec = store.cached_result(job_id)
        if rec is None or rec.state != "completed":
            return None
        value: R = decode_json(rec.returnvalue)
        return value

    async def get_jobs(
        self, states: str | Sequence[str] = ("waiting",), start: int = 0, end: int = -1
    ) -> list[TestJob[D, R]]:
        """Jobs in the given state(s), `start..end` inclusive within each state.

        Finished states list the newest first; the others in the order they will run.
        """
        wanted = [states] if isinstance(states, str) else list(states)
        store = await self._ready()
        out: list[TestJob[D, R]] = []
        for state in wanted:
            if state not in _STATES:
                raise ValidationError("states", f"unknown state {state!r}; one of {_STATES}")
            for job_id in bulk.job_ids(store, _wire_state(state), start, end):
                rec = store.jobs.get(job_id)
                if rec is not None:
                    out.append(TestJob.from_record(store, rec))
        return out

    async def search_jobs(
        self,
        name: str | None = None,
        *,
        state: str | Sequence[str] | None = None,
        data: Mapping[str, Any] | None = None,
        limit: int = 100,
        scan: int = 10_000,
        text: str | None = None,
    ) -> list[TestJob[D, R]]:
        """Jobs whose name matches the glob `name`, whose data has the given top-level field
        values and whose data's JSON text contains `text` (ASCII case ignored), in `state`
        (one or several; default all), at most `limit`. Looks at no more than `scan` jobs per
        state."""
        if name is not None and (not isinstance(name, str) or name.count("*") > _MAX_STARS):
            raise ValidationError("name", f"must be a glob pattern with at most {_MAX_STARS} '*'")
        states = _SEARCH_STATES if state is None else (state,) if isinstance(state, str) else state
        for s in states:
            if s not in _SEARCH_STATES:
                raise ValidationError("state", f"unknown state {s!r}; one of {_SEARCH_STATES}")
        for label, value in (("limit", limit), ("scan", scan)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(label, "must be an integer >= 1")
        _check_data_filter(data)
        if text is not None:
            if not isinstance(text, str) or not text:
                raise ValidationError("text", "must be a non-empty string")
            text = ascii_lower(text)
        store = await self._ready()
        ids: list[str] = []
        for s in dict.fromkeys(states):  # each state once, in the order given
            ids += bulk.search(store, _wire_state(s), name, data, limit - len(ids), scan, text)
            if len(ids) >= limit:
                break
        return [TestJob.from_record(store, store.jobs[i]) for i in ids]

    async def get_metrics(self, kind: str = "completed", *, minutes: int = 60) -> Metrics:
        """Jobs completed (or failed for good) per minute over the last `minutes` (<= 1440)."""
        if kind not in ("completed", "failed"):
            raise ValidationError("kind", f"must be one of ('completed', 'failed'), got {kind!r}")
        if isinstance(minutes, bool) or not isinstance(minutes, int):
            raise ValidationError("minutes", "must be an integer")
        if not 1 <= minutes <= _METRICS_MINUTES:
            raise ValidationError("minutes", f"must be between 1 and {_METRICS_MINUTES}")
        store = await self._ready()
        last = store.clock.now_ms() // 60_000
        per_minute = store.metrics[kind]
        counts = tuple(per_minute.get(m, 0) for m in range(last - minutes + 1, last + 1))
        return Metrics(kind, (last - minutes + 1) * 60_000, counts)

    async def get_workers(self) -> list[WorkerInfo]:
        """The workers serving this queue now (started and not closed), oldest first."""
        store = await self._ready()
        now = store.clock.now_ms()
        host, pid = socket.gethostname(), os.getpid()
        live = sorted(store.workers, key=lambda w: w.started_at)
        return [
            WorkerInfo(w.consumer, host, pid, w.started_at, w.opts.concurrency, now) for w in live
        ]

    async def get_job_counts(self) -> JobCounts:
        """Counts of jobs by state."""
        store = await self._ready()
        return JobCounts(**bulk.counts(store, store.clock.now_ms()))

    async def count(self) -> int:
        """Jobs not yet started: waiting, prioritized and delayed."""
        c = await self.get_job_counts()
        return c.waiting + c.prioritized + c.delayed

    async def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1
    ) -> tuple[list[str], int]:
        """The job's log lines in `start..end` and the total number of lines."""
        store = await self._ready()
        rec = store.jobs.get(job_id)
        lines = [] if rec is None else rec.logs
        return redis_range(lines, start, end), len(lines)

    async def get_dead_letter_jobs(self, start: int = 0, end: int = -1) -> list[TestJob[D, R]]:
        """Jobs that failed for good while their worker had `dead_letter=True`, newest first."""
        return await self.get_jobs("dead_letter", start, end)

    # -- control -----------------------------------------------------------------------------

    async def pause(self) -> None:
        """Stop workers from taking new jobs (running jobs finish)."""
        store = await self._ready()
        store.paused = True
        store.emit("paused", None)

    async def resume(self) -> None:
        """Let workers take jobs again."""
        store = await self._ready()
        store.paused = False
        store.emit("resumed", None)
        store.notify()

    async def is_paused(self) -> bool:
        return (await self._ready()).paused

    async def set_global_concurrency(self, n: int) -> None:
        """Run at most `n` jobs of the queue at once over all workers; 0 removes the limit."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValidationError("concurrency", f"must be an integer >= 0, got {n!r}")
        store = await self._ready()
        store.concurrency = n
        store.notify()

    async def get_global_concurrency(self) -> int:
        """The limit set by `set_global_concurrency` (0: none)."""
        return (await self._ready()).concurrency

    async def set_global_rate_limit(self, max: int, duration: int) -> None:
        """At most `max` jobs start per window of `duration` ms, over all workers."""
        limit = RateLimit(max, duration)
        (await self._ready()).rate = limit

    async def get_global_rate_limit(self) -> RateLimit | None:
        """The limit set by `set_global_rate_limit`, or None."""
        return (await self._ready()).rate

    async def remove_global_rate_limit(self) -> None:
        """Lift the queue's rate limit (worker limiters still apply)."""
        store = await self._ready()
        store.rate = None
        store.windows["queue"].reset()
        store.notify()

    async def remove(self, job_id: str) -> None:
        """Delete a job that is not running."""
        store = await self._ready()
        check_reply(store.remove(job_id), self.name, job_id, "remove")

    async def revoke(self, job_id: str) -> str:
        """Cancel a job: one not started fails at once with reason `revoked` ('revoked');
        a running one is flagged and aborted by its worker ('flagged')."""
        store = await self._ready()
        return check_reply(store.revoke(job_id, store.clock.now_ms()), self.name, job_id, "revoke")

    async def retry_jobs(self, count: int = 1000, state: str = "failed") -> int:
        """Send up to `count` failed (or completed, dead_letter) jobs back to waiting."""
        source = retry_source(state)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValidationError("count", "must be a positive integer")
        store = await self._ready()
        return bulk.retry_jobs(store, source, count, (), store.clock.now_ms())

    async def drain(self, delayed: bool = False) -> int:
        """Remove every job waiting to run (and delayed ones too if `delayed`); running jobs
        are left alone. Returns how many were removed."""
        return bulk.drain(await self._ready(), delayed)

    async def clean(self, grace: int, limit: int = 1000, state: str = "completed") -> list[str]:
        """Remove up to `limit` jobs in `state` older than `grace` ms; returns their ids."""
        if state not in _CLEANABLE:
            raise ValidationError("state", f"must be one of {_CLEANABLE}")
        for field, value in (("grace", grace), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(field, "must be an integer >= 0")
        store = await self._ready()
        return bulk.clean(store, _wire_state(state), store.clock.now_ms() - grace, limit)

    async def obliterate(self, force: bool = False) -> None:
        """Delete the queue and every job in it. Refused while jobs run unless `force`."""
        store = await self._ready()
        if store.active and not force:
            raise GlideMQError(
                f"queue {self.name!r} has running jobs; close the workers or pass force=True"
            )
        store.reset()
        store.notify()

    def __repr__(self) -> str:
        return f"<TestQueue {self.name!r} on {self.server!r}>"


install_unsupported(TestQueue, Queue, UNSUPPORTED_QUEUE_METHODS)
