"""TestJob: a glidemq Job whose fields and methods are backed by an in-memory queue."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import (
    JobNotFoundError,
    JobStateError,
    JobTimeoutError,
    SuspendedError,
    UnrecoverableError,
    WaitingChildrenError,
)
from ..flowview import Dependencies, dependencies_of
from ..job import (
    FINISHED,
    Job,
    JobState,
    check_delay,
    check_next_step,
    check_priority,
    check_progress,
    retry_source,
)
from ..keys import QueueKeys
from ..serialize import decode_data, decode_json, encode_data, encode_progress
from ..serializers import get_serializer
from ..suspend import check_suspend
from ..usage import Usage, check_usage
from . import flows, streams, suspend, usage
from .bulk import retry_jobs
from .store import JobRecord, QueueStore
from .support import UNSUPPORTED_JOB_METHODS, install_unsupported

if TYPE_CHECKING:
    from .worker import TestWorker

__all__ = ["TestJob", "check_reply"]

D = TypeVar("D")
R = TypeVar("R")


def check_reply(reply: str, queue: str, job_id: str, op: str) -> str:
    """Turn a single-job operation's reply into the typed errors the real Queue raises."""
    if reply == "0":
        raise JobNotFoundError(queue, job_id)
    if reply == "ERR:ACTIVE":
        raise JobStateError(job_id, op, "it is running; revoke it or wait for it to finish")
    if reply == "ERR:STATE":
        raise JobStateError(job_id, op, "not possible in its current state")
    if reply == "ERR:FINISHED":
        raise JobStateError(job_id, op, "it already finished")
    return reply


class TestJob(Job[D, R]):
    """A Job of an in-memory queue: the same fields and methods as `glidemq.Job`.

    Like a real Job it is a snapshot: its fields change only through its own methods and
    `refresh()`.
    """

    __test__ = False  # not a pytest test class
    __slots__ = ("_fail_now", "_runner", "_store")

    _store: QueueStore
    _runner: TestWorker[Any, Any] | None
    _fail_now: Callable[[TestJob[Any, Any], BaseException], Awaitable[None]] | None

    @classmethod
    def from_record(
        cls,
        store: QueueStore,
        rec: JobRecord,
        runner: TestWorker[Any, Any] | None = None,
        fail_now: Callable[[TestJob[Any, Any], BaseException], Awaitable[None]] | None = None,
    ) -> TestJob[Any, Any]:
        """A snapshot of the stored job; `runner` is the worker running it, if any, and
        `fail_now` how it fails the job from inside the processor."""
        job: TestJob[Any, Any] = cls.__new__(cls)
        for name in Job.__slots__:  # fields added to Job later still exist here
            if not name.startswith("_"):
                setattr(job, name, None)
        job._store, job._runner, job._worker = store, runner, None
        job._fail_now = fail_now
        job._discarded = job._moved = False
        job._fill(rec)
        return job

    def _fill(self, rec: JobRecord) -> None:
        self.id, self.name, self.data = rec.id, rec.name, decode_data(rec.data)
        self.opts = copy.deepcopy(rec.opts)
        self.timestamp, self.attempts_made = rec.timestamp, rec.attempts_made
        self.max_attempts, self.delay, self.priority = rec.max_attempts, rec.delay, rec.priority
        self.state, self.processed_on, self.finished_on = (
            rec.state,
            rec.processed_on,
            rec.finished_on,
        )
        self.returnvalue = decode_json(rec.returnvalue) if rec.returnvalue is not None else None
        self.failed_reason, self.stacktrace = rec.failed_reason, rec.stacktrace
        self.progress = decode_json(rec.progress) if rec.progress is not None else 0
        self.parent_id, self.expire_at = rec.parent_id, rec.expire_at
        self.revoked, self.stalled_count, self.entry_id = rec.revoked, rec.stalled_count, rec.sid
        self.step = rec.step
        self.group_key = rec.group_key
        self.ordering_key = rec.group_key if rec.ordering else None
        self.cost = rec.cost / 1000 if rec.cost else None
        self.usage = rec.usage
        self.signals = list(rec.signals)

    def __repr__(self) -> str:
        return f"<TestJob {self._store.name}:{self.id} {self.name!r} {self.state}>"

    @property
    def ctx_name(self) -> str:
        """Name of the job's queue."""
        return self._store.name

    @property
    def queue_name(self) -> str:
        """Name of the job's queue."""
        return self._store.name

    @property
    def queue_keys(self) -> QueueKeys:
        """The keys of the job's queue."""
        return QueueKeys(self._store.name, self._store.prefix)

    def _now(self) -> int:
        return self._store.clock.now_ms()

    def _record(self) -> JobRecord:
        rec = self._store.jobs.get(self.id)
        if rec is None:
            raise JobNotFoundError(self._store.name, self.id)
        return rec

    # -- lifecycle -------------------------------------------------------------------------

    async def log(self, message: str) -> int:
        """Append a line to the job's log; returns the log's length."""
        n = self._store.log(self.id, [message])
        if n == 0:
            raise JobNotFoundError(self._store.name, self.id)
        return n

    async def update_progress(self, progress: int | float | Mapping[str, Any]) -> None:
        """Store the job's progress and emit a `progress` event."""
        check_progress(progress)
        if not self._store.update(self.id, progress=encode_progress(progress)):
            raise JobNotFoundError(self._store.name, self.id)
        self.progress = progress
        if self._runner is not None:
            self._runner.events.emit("progress", self, progress)

    async def report_usage(
        self,
        *,
        model: str | None = None,
        provider: str | None = None,
        tokens: Mapping[str, int] | None = None,
        costs: Mapping[str, float] | None = None,
        latency_ms: int | None = None,
    ) -> Usage:
        """Record one model call (see `glidemq.Job.report_usage`); returns the job's usage."""
        args = check_usage(model, provider, tokens, costs, latency_ms)
        limiter = self._runner.opts.token_limiter if self._runner is not None else None
        self.usage = usage.report(self._store, self.id, *args, limiter)
        return self.usage

    async def stream(self, chunk: Any) -> str:
        """Append `chunk` to this job's stream (see `glidemq.Job.stream`); its entry id."""
        return streams.append(self._store, self.id, chunk)

    async def update_data(self, data: D) -> None:
        """Replace the job's data."""
        serializer = get_serializer(self._store.serializer)
        if not self._store.update(self.id, data=encode_data(data, serializer=serializer)):
            raise JobNotFoundError(self._store.name, self.id)
        self.data = data

    async def move_to_delayed(self, timestamp_ms: int, next_step: str | None = None) -> None:
        """From inside a processor: put this running job back to delayed until `timestamp_ms`.
        With `next_step`, the next run sees it as `job.step` (step jobs); without, the step
        stays as it is.

        Always raises DelayedError, which the processor should let propagate.
        """
        check_next_step(next_step)
        if self.entry_id is None or self._runner is None:
            raise JobStateError(self.id, "move to delayed", "only a running job can be delayed")
        state = self._store.move_active_to_delayed(
            self.id, self.entry_id, timestamp_ms, self._now(), next_step
        )
        self._moved_to_delayed(state, timestamp_ms, next_step)

    async def suspend(self, reason: str | None = None, timeout_ms: int | None = None) -> None:
        """From inside a processor: end this run and wait for a signal (see
        `glidemq.Job.suspend`). Raises SuspendedError, which the processor should let
        propagate."""
        why, timeout = check_suspend(reason, timeout_ms)
        if self.entry_id is None or self._runner is None:
            raise JobStateError(self.id, "suspend", "only a running job can be suspended")
        state = suspend.suspend(self._store, self.id, self.entry_id, why, timeout, self._now())
        if state != "suspended":
            raise JobStateError(self.id, "suspend", "the worker no longer owns it")
        self._moved = True
        self.state = state
        raise SuspendedError(f"job {self.id} suspended: {why or 'no reason given'}")

    async def move_to_failed(self, error: BaseException) -> None:
        """From inside a processor: fail this run now with `error` (retries still apply)."""
        if self._runner is None or self._fail_now is None or self.entry_id is None:
            raise JobStateError(self.id, "move to failed", "only a running job can be failed")
        await self._fail_now(self, error)
        self._moved = True

    async def move_to_waiting_children(self) -> None:
        """From inside a processor: stop running until this job's pending children finished;
        it runs again after the last one. Returns when none is pending (go on); otherwise
        raises WaitingChildrenError, which the processor should let propagate."""
        if self.entry_id is None or self._runner is None:
            raise JobStateError(
                self.id, "move to waiting-children", "only a running job can wait for children"
            )
        status, detail = flows.move_to_waiting_children(
            self._store, self.id, self.entry_id, self._now()
        )
        if status == "continue":
            return
        if status == "failed":
            raise UnrecoverableError(detail)
        if status != "waiting-children":
            raise JobStateError(self.id, "move to waiting-children", "the worker no longer owns it")
        self._moved = True
        self.state = "waiting-children"
        raise WaitingChildrenError(f"job {self.id} waits for its children")

    async def get_children_values(self) -> dict[str, Any]:
        """Return values of this job's completed children, by `"<queue>:<id>"`."""
        await asyncio.sleep(0)
        return {k: decode_json(v) for k, v in self._record().children_values.items()}

    async def get_ignored_children_failures(self) -> dict[str, str]:
        """Failure reasons of children failed with `ignore_dependency_on_failure`, by
        `"<queue>:<id>"`."""
        await asyncio.sleep(0)
        rec = self._record()
        return {k: v for k, v in rec.ignored_failures.items() if k != rec.failed_by}

    async def get_children_failures(self) -> dict[str, str]:
        """Failure reasons recorded for this job's children (those failed with
        `ignore_dependency_on_failure` or `continue_parent_on_failure`), by
        `"<queue>:<id>"`."""
        await asyncio.sleep(0)
        return dict(self._record().ignored_failures)

    async def get_dependencies(
        self, *, processed: bool = True, unprocessed: bool = True
    ) -> Dependencies:
        """This job's children: completed ones with their values and recorded failures
        (`processed`), pending ones (`unprocessed`), and the count of each."""
        await asyncio.sleep(0)
        return dependencies_of(flows.node_record(self._record()), processed, unprocessed)

    async def get_parents(self) -> list[tuple[str, str]]:
        """(queue name, job id) of every flow parent of this job; empty for none."""
        await asyncio.sleep(0)
        return list(self._record().parents)

    async def remove(self) -> None:
        """Delete the job; refused while a worker runs it."""
        check_reply(self._store.remove(self.id), self._store.name, self.id, "remove")

    async def retry(self, state: str = "failed") -> None:
        """Send a finished job (`failed` or `completed`) back to waiting with fresh attempts."""
        source = retry_source(state)
        if retry_jobs(self._store, source, 1, [self.id], self._now()) != 1:
            self._record()
            raise JobStateError(self.id, "retry", f"it is not {state}")

    async def change_priority(self, priority: int) -> None:
        """Re-prioritize a job that is not running yet."""
        check_priority(priority)
        reply = self._store.change_priority(self.id, priority, self._now())
        self.state = check_reply(reply, self._store.name, self.id, "change priority")
        self.priority = priority

    async def change_delay(self, delay: int) -> None:
        """Set a delayed job's remaining delay to `delay` ms from now."""
        check_delay(delay)
        reply = self._store.change_delay(self.id, delay, self._now())
        self.state = check_reply(reply, self._store.name, self.id, "change delay")
        self.delay = delay

    async def promote(self) -> None:
        """Make a delayed job runnable now."""
        reply = self._store.promote_job(self.id, self._now())
        self.state = check_reply(reply, self._store.name, self.id, "promote")

    # -- queries ---------------------------------------------------------------------------

    async def get_state(self) -> JobState:
        """The job's current state."""
        rec = self._record()
        dead = rec.state == "failed" and rec.id in self._store.finished["dlq"]
        self.state = "dead_letter" if dead else rec.state
        return self.state

    async def is_revoked(self) -> bool:
        rec = self._store.jobs.get(self.id)
        return rec is not None and rec.revoked

    async def refresh(self) -> TestJob[D, R]:
        """Re-read every field."""
        self._fill(self._record())
        return self

    async def wait_until_finished(
        self, poll_interval: float = 0.05, timeout: float | None = None
    ) -> JobState:
        """Wait until the job completed or failed; returns that state, refreshes the fields.

        Raises JobTimeoutError when `timeout` seconds (real time) pass first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = await self.get_state()
            if state in FINISHED:
                await self.refresh()
                return state
            wait = poll_interval
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobTimeoutError(f"job {self.id} still {state} after {timeout} s")
                wait = min(wait, left)
            await self._store.changed(max(wait, 0.001))
            await asyncio.sleep(0)  # let the change's own callbacks run first


install_unsupported(TestJob, Job, UNSUPPORTED_JOB_METHODS)
