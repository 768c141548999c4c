"""`glidemq.sync.Queue` and `glidemq.sync.Job`: the Queue and Job API for code without an
event loop, each call blocking until the server answered (see `runner`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from ..client.connection import ConnectionLike, resolve_connection
from ..encoding.serializers import DEFAULT_SERIALIZER
from ..errors import JobFailedError, QueueClosedError
from ..job.job import Job as AsyncJob
from ..job.job import JobState
from ..keys import DEFAULT_PREFIX
from ..options import foreign
from ..options.durability import DurabilityLike
from ..options.limits import RateLimit
from ..queue import queue as async_queue
from ..queue.admin import JobCounts
from ..queue.backlog import Backlog
from ..queue.groups import GroupInfo
from ..queue.queries import Metrics, WorkerInfo
from ..types import JobOptions
from . import runner
from .direct import CLIENT_PREFIX, DirectClient, Retryable, available
from .runner import DEFAULT_TIMEOUT

__all__ = ["Job", "Queue"]

D = TypeVar("D")
R = TypeVar("R")
T = TypeVar("T")


class Queue(Generic[D, R]):
    """A queue for sync code: `Queue("emails").add("welcome", {"to": ...})` returns a Job.

    The same options as `glidemq.Queue`; `timeout` (seconds, None for none) is how long each
    call waits before OperationTimeoutError. Safe to share between threads; after `os.fork`
    the child opens a connection of its own on first use. Use it as `with` or call `close()`
    (at interpreter exit, open queues are closed)."""

    def __init__(
        self,
        name: str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        result_ttl: int | None = None,
        serializer: str = DEFAULT_SERIALIZER,
        timeout: float | None = DEFAULT_TIMEOUT,
        durability: DurabilityLike = None,
    ) -> None:
        self.name = name
        self.connection = resolve_connection(connection).with_durability(durability)
        self.timeout = timeout
        self._options: dict[str, Any] = {
            "connection": self.connection,
            "prefix": prefix,
            "compression": compression,
            "result_ttl": result_ttl,
            "serializer": serializer,
        }
        async_queue.Queue(name, **self._options)  # bad options fail here, not on first use
        self._lock = threading.Lock()
        self._async: async_queue.Queue[D, R] | None = None
        self._direct: DirectClient | None = None
        if available():
            self._direct = DirectClient(self.connection, CLIENT_PREFIX + name, timeout, queue=name)
        self._pid = os.getpid()
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"glidemq.sync.Queue({self.name!r})"

    @property
    def aio(self) -> async_queue.Queue[D, R]:
        """The async Queue behind this one, bound to the sync API's loop: for `runner.aio`."""
        if self._closed:
            raise QueueClosedError(self.name)
        with self._lock:
            if self._async is None or self._pid != os.getpid():
                # A forked child never touches the parent's client: its threads are gone.
                self._async = async_queue.Queue(self.name, **self._options)
                self._pid = os.getpid()
                runner.close_at_exit(id(self), self._async.close)
            return self._async

    def _call(self, make: Callable[[async_queue.Queue[D, R]], Coroutine[Any, Any, T]]) -> T:
        queue = self.aio
        return runner.call(lambda: make(queue), self.timeout)

    def _job(self, job: AsyncJob[D, R] | None) -> Job[D, R] | None:
        return None if job is None else Job(job, self)

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            queue, self._async = self._async, None
            runner.close_at_exit(id(self), None)
        if self._direct is not None:
            self._direct.close()
        if queue is not None and self._pid == os.getpid():
            runner.call(queue.close, self.timeout)

    # -- adding ---------------------------------------------------------------------------

    def add(
        self, name: str, data: D | None = None, opts: JobOptions | Mapping[str, Any] | None = None
    ) -> Job[D, R] | None:
        """Add one job; as `glidemq.Queue.add` (None when a custom id or deduplication
        skipped it)."""
        direct = self._direct
        if direct is not None and self._pid == os.getpid():
            queue = self.aio
            prepared = queue.plain_add_call(name, data, opts)
            if prepared is not None:
                call, options, now = prepared
                try:
                    reply = direct.fcall(call.function, call.keys, call.args, call.safe)
                except Retryable:
                    pass  # not run: the async path reloads the library or reconnects
                else:
                    return self._job(queue.plain_add_done(call, reply, name, data, options, now))
            elif direct.cold and queue.connection.backend is None:
                # The first add connects on the sync loop; the blocking client for the next
                # ones opens here meanwhile (a memory server has no address to open).
                return self._job(
                    runner.call(lambda: queue.add(name, data, opts), self.timeout, direct.warm)
                )
        return self._job(self._call(lambda q: q.add(name, data, opts)))

    def add_bulk(
        self, jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]]
    ) -> list[Job[D, R] | None]:
        """Add many jobs, pipelined; as `glidemq.Queue.add_bulk`."""
        items = list(jobs)
        return [self._job(j) for j in self._call(lambda q: q.add_bulk(items))]

    def add_and_wait(
        self,
        name: str,
        data: D | None = None,
        opts: JobOptions | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = 30.0,
    ) -> R:
        """Add a job and return its return value; JobFailedError when it failed for good,
        JobTimeoutError after `timeout` seconds. As `glidemq.Queue.add_and_wait`."""
        queue = self.aio
        wait = None if timeout is None else timeout + 5.0  # the inner timeout speaks first
        return runner.call(lambda: queue.add_and_wait(name, data, opts, timeout=timeout), wait)

    # -- reading --------------------------------------------------------------------------

    def get_job(self, job_id: str) -> Job[D, R] | None:
        """The job `job_id`, or None."""
        return self._job(self._call(lambda q: q.get_job(job_id)))

    def get_jobs(
        self, states: str | Sequence[str] = ("waiting",), start: int = 0, end: int = -1
    ) -> list[Job[D, R]]:
        """Jobs in the given state(s); as `glidemq.Queue.get_jobs`."""
        return [Job(j, self) for j in self._call(lambda q: q.get_jobs(states, start, end))]

    def get_result(self, job_id: str) -> R | None:
        """The return value of a completed job, or None."""
        return self._call(lambda q: q.get_result(job_id))

    def get_job_counts(self) -> JobCounts:
        """Counts of jobs by state, read in one call."""
        return self._call(lambda q: q.get_job_counts())

    def get_backlog(self) -> Backlog:
        """The jobs waiting to start, the running ones and the age of the oldest waiting one
        (`glidemq.Queue.get_backlog`)."""
        return self._call(lambda q: q.get_backlog())

    def count(self) -> int:
        """Jobs not yet started (waiting, prioritized, delayed)."""
        return self._call(lambda q: q.count())

    def get_job_logs(self, job_id: str, start: int = 0, end: int = -1) -> tuple[list[str], int]:
        """The job's log lines in `start..end` and the total number of lines."""
        return self._call(lambda q: q.get_job_logs(job_id, start, end))

    def is_paused(self) -> bool:
        """Whether the queue is paused."""
        return self._call(lambda q: q.is_paused())

    def get_dead_letter_jobs(self, start: int = 0, end: int = -1) -> list[Job[D, R]]:
        """Jobs parked in the dead-letter set, newest first."""
        return self.get_jobs("dead_letter", start, end)

    def search_jobs(self, name: str | None = None, **criteria: Any) -> list[Job[D, R]]:
        """Jobs by name glob, data fields, text and state; as `glidemq.Queue.search_jobs`."""
        found = self._call(lambda q: q.search_jobs(name, **criteria))
        return [Job(j, self) for j in found]

    def get_metrics(self, kind: str = "completed", *, minutes: int = 60) -> Metrics:
        """Jobs completed (or failed for good) per minute over the last `minutes`."""
        return self._call(lambda q: q.get_metrics(kind, minutes=minutes))

    def get_workers(self) -> list[WorkerInfo]:
        """The workers serving this queue now."""
        return self._call(lambda q: q.get_workers())

    def get_global_rate_limit(self) -> RateLimit | None:
        """The queue's rate limit over all workers, or None."""
        return self._call(lambda q: q.get_global_rate_limit())

    def get_global_concurrency(self) -> int:
        """The queue's limit of jobs running at once over all workers (0: none)."""
        return self._call(lambda q: q.get_global_concurrency())

    # -- managing -------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop workers from taking new jobs (running jobs finish)."""
        self._call(lambda q: q.pause())

    def resume(self) -> None:
        """Let workers take jobs again."""
        self._call(lambda q: q.resume())

    # -- groups (glidemq.queue.groups) ------------------------------------------------------

    def pause_group(self, key: str) -> None:
        """None of the group's jobs start until `resume_group`; the other groups go on."""
        self._call(lambda q: q.pause_group(key))

    def resume_group(self, key: str) -> None:
        """The group's jobs start again."""
        self._call(lambda q: q.resume_group(key))

    def set_group_concurrency(self, key: str, concurrency: int | None) -> None:
        """At most `concurrency` of the group's jobs run at once (None: adds decide)."""
        self._call(lambda q: q.set_group_concurrency(key, concurrency))

    def set_group_rate_limit(self, key: str, limit: RateLimit | None) -> None:
        """At most `limit.max` of the group's jobs start per `limit.duration` ms (None: none)."""
        self._call(lambda q: q.set_group_rate_limit(key, limit))

    def set_max_group_size(self, key: str, size: int | None) -> None:
        """Refuse adds past `size` jobs of the group not started yet (GroupFullError)."""
        self._call(lambda q: q.set_max_group_size(key, size))

    def get_groups(self) -> list[GroupInfo]:
        """Every group of the queue."""
        return self._call(lambda q: q.get_groups())

    def get_group(self, key: str) -> GroupInfo | None:
        """One group, or None."""
        return self._call(lambda q: q.get_group(key))

    def get_group_counts(self, key: str) -> dict[str, int]:
        """The group's jobs by state (waiting, parked, active)."""
        return self._call(lambda q: q.get_group_counts(key))

    def get_group_jobs(
        self, key: str, state: str = "group-waiting", start: int = 0, end: int = -1
    ) -> list[Job[D, R]]:
        """The group's jobs in `state`; as `glidemq.Queue.get_group_jobs`."""
        jobs = self._call(lambda q: q.get_group_jobs(key, state, start, end))
        return [Job(j, self) for j in jobs]

    def remove(self, job_id: str) -> None:
        """Delete a job that is not running."""
        self._call(lambda q: q.remove(job_id))

    def revoke(self, job_id: str) -> str:
        """Cancel a job ('revoked' when it had not started, 'flagged' when running)."""
        return self._call(lambda q: q.revoke(job_id))

    def retry_jobs(self, count: int = 1000, state: str = "failed") -> int:
        """Send up to `count` failed (or completed, dead_letter) jobs back to waiting."""
        return self._call(lambda q: q.retry_jobs(count, state))

    def drain(self, delayed: bool = False) -> int:
        """Remove every job waiting to run (and delayed ones if `delayed`); how many."""
        return self._call(lambda q: q.drain(delayed))

    def clean(self, grace: int, limit: int = 1000, state: str = "completed") -> list[str]:
        """Remove up to `limit` jobs in `state` older than `grace` ms; their ids."""
        return self._call(lambda q: q.clean(grace, limit, state))

    def obliterate(self, force: bool = False) -> None:
        """Delete the queue and every job in it (refused while jobs run unless `force`)."""
        self._call(lambda q: q.obliterate(force))

    def set_global_rate_limit(self, max: int, duration: int) -> None:
        """At most `max` jobs start per `duration` ms, counted over all workers."""
        self._call(lambda q: q.set_global_rate_limit(max, duration))

    def remove_global_rate_limit(self) -> None:
        """Lift the queue's rate limit."""
        self._call(lambda q: q.remove_global_rate_limit())

    def set_global_concurrency(self, n: int) -> None:
        """Run at most `n` jobs of the queue at once over all workers; 0 removes the limit."""
        self._call(lambda q: q.set_global_concurrency(n))

    def upsert_job_scheduler(self, name: str, **options: Any) -> Any:
        """Create or replace a job scheduler; as `glidemq.Queue.upsert_job_scheduler`."""
        return self._call(lambda q: q.upsert_job_scheduler(name, **options))

    def remove_job_scheduler(self, name: str) -> bool:
        """Delete the scheduler `name`; False if there was none."""
        return self._call(lambda q: q.remove_job_scheduler(name))


class Job(Generic[D, R]):
    """A job as the sync API returns it: the fields of `glidemq.Job` and blocking methods.

    `state` is read from the server each time; `returnvalue` and `failed_reason` are re-read
    while the job has not finished; the other fields (`progress`, `attempts_made`, ...) are
    as of the last read (`refresh()`)."""

    def __init__(self, job: AsyncJob[D, R], queue: Queue[D, R]) -> None:
        self._job = job
        self._queue = queue
        self._pid = os.getpid()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or callable(getattr(AsyncJob, name, None)):
            raise AttributeError(name)
        if name in foreign.JOB_METHODS:  # Celery's AsyncResult.get() and the like
            raise foreign.missing_attribute("glidemq.sync.Job", name, foreign.JOB_METHODS)
        return getattr(self._job, name)

    def __repr__(self) -> str:
        return f"glidemq.sync.Job({self._job.id!r}, name={self._job.name!r})"

    @property
    def id(self) -> str:
        return self._job.id

    @property
    def name(self) -> str:
        return self._job.name

    @property
    def data(self) -> D:
        return self._job.data

    @property
    def state(self) -> JobState:
        """The job's state now: read from the server each time (as Celery's
        `AsyncResult.state`), the same as `get_state()`."""
        return self.get_state()

    @property
    def returnvalue(self) -> R | None:
        """The return value; re-read from the server while the job has not finished."""
        return self._finished_fields().returnvalue

    @property
    def failed_reason(self) -> str | None:
        """Why the last try failed; re-read from the server while the job has not finished."""
        return self._finished_fields().failed_reason

    def _finished_fields(self) -> AsyncJob[D, R]:
        if self._job.finished_on is None:  # not read since it finished: read it again
            self.refresh()
        return self._job

    def _call(self, make: Callable[[AsyncJob[D, R]], Coroutine[Any, Any, T]]) -> T:
        if self._pid != os.getpid():  # forked: read it again through the child's connection
            queue, job_id = self._queue.aio, self.id
            fresh = runner.call(lambda: queue.get_job(job_id), self._queue.timeout)
            if fresh is not None:
                self._job, self._pid = fresh, os.getpid()
        inner = self._job
        return runner.call(lambda: make(inner), self._queue.timeout)

    def get_state(self) -> JobState:
        """The job's state now."""
        return self._call(lambda j: j.get_state())

    def refresh(self) -> Self:
        """Re-read every field from the server."""
        self._call(lambda j: j.refresh())
        return self

    def wait_until_finished(self, timeout: float | None = 30.0) -> JobState:
        """Wait until the job completed or failed (JobTimeoutError after `timeout` s);
        returns that state with the fields re-read."""
        inner = self._job
        wait = None if timeout is None else timeout + 5.0
        return runner.call(lambda: inner.wait_until_finished(timeout=timeout), wait)

    def result(self, timeout: float | None = 30.0) -> R | None:
        """Wait for the job (as `result.get()` in Celery): its return value, or
        JobFailedError when it failed."""
        if self.wait_until_finished(timeout) != "completed":
            job = self._job
            raise JobFailedError(self._queue.name, job.id, job.failed_reason, job.stacktrace)
        return self._job.returnvalue

    def remove(self) -> None:
        """Delete the job (not while it runs)."""
        self._call(lambda j: j.remove())

    def retry(self, state: str = "failed") -> None:
        """Send a failed (or completed) job back to waiting."""
        self._call(lambda j: j.retry(state))

    def promote(self) -> None:
        """Run a delayed job now."""
        self._call(lambda j: j.promote())

    def change_delay(self, delay: int) -> None:
        """Run a delayed job `delay` ms from now instead."""
        self._call(lambda j: j.change_delay(delay))

    def change_priority(self, priority: int) -> None:
        """Give a waiting job another priority."""
        self._call(lambda j: j.change_priority(priority))
