"""A job: its fields as stored in the job hash, and the operations on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson

from .context import QueueContext, now_ms
from .errors import DelayedError, JobNotFoundError, JobStateError, JobTimeoutError, ValidationError
from .serialize import decode_data, decode_json, encode_data, encode_json

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["Job", "JobState"]

D = TypeVar("D")
R = TypeVar("R")

JobState = str
"""One of: waiting, active, delayed, prioritized, completed, failed (wire protocol states)."""

FINISHED = ("completed", "failed")


def _int(value: bytes | None, default: int = 0) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def _opt_int(value: bytes | None) -> int | None:
    return None if value is None else _int(value)


def _str(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


class Job(Generic[D, R]):
    """A job read from the server. Fields mirror the job hash; methods act on the server."""

    __slots__ = (
        "_ctx",
        "_discarded",
        "_moved",
        "_worker",
        "attempts_made",
        "data",
        "delay",
        "entry_id",
        "expire_at",
        "failed_reason",
        "finished_on",
        "id",
        "max_attempts",
        "name",
        "opts",
        "parent_id",
        "priority",
        "processed_on",
        "progress",
        "returnvalue",
        "revoked",
        "stacktrace",
        "stalled_count",
        "state",
        "timestamp",
    )

    def __init__(
        self,
        ctx: QueueContext,
        fields: Mapping[bytes, bytes],
        *,
        entry_id: str | None = None,
        worker: Worker[Any, Any] | None = None,
    ) -> None:
        self._ctx = ctx
        self._worker = worker
        self._discarded = False
        self._moved = False
        g = fields.get
        self.id: str = g(b"id", b"").decode()
        self.name: str = g(b"name", b"").decode()
        self.data: D = decode_data(g(b"data"))
        raw_opts = g(b"opts")
        self.opts: dict[str, Any] = orjson.loads(raw_opts) if raw_opts and raw_opts != b"{}" else {}
        self.timestamp: int = _int(g(b"timestamp"))
        self.attempts_made: int = _int(g(b"attemptsMade"))
        self.max_attempts: int = _int(g(b"maxAttempts"))
        self.delay: int = _int(g(b"delay"))
        self.priority: int = _int(g(b"priority"))
        self.state: JobState = g(b"state", b"unknown").decode()
        self.processed_on: int | None = _opt_int(g(b"processedOn"))
        self.finished_on: int | None = _opt_int(g(b"finishedOn"))
        rv = g(b"returnvalue")
        self.returnvalue: R | None = decode_json(rv) if rv is not None else None
        self.failed_reason: str | None = _str(g(b"failedReason"))
        self.stacktrace: str | None = _str(g(b"stacktrace"))
        pr = g(b"progress")
        self.progress: Any = decode_json(pr) if pr is not None else 0
        self.parent_id: str | None = _str(g(b"parentId"))
        self.expire_at: int | None = _opt_int(g(b"expireAt"))
        self.revoked: bool = g(b"revoked") == b"1"
        self.stalled_count: int = _int(g(b"stalledCount"))
        self.entry_id: str | None = entry_id or _str(g(b"sid"))

    @classmethod
    def _created(
        cls,
        ctx: QueueContext,
        job_id: str,
        name: str,
        data: Any,
        opts: dict[str, Any],
        timestamp: int,
        delay: int,
        priority: int,
        attempts: int,
    ) -> Job[Any, Any]:
        """A job just added by this process: built from what was sent, without a read."""
        job: Job[Any, Any] = cls.__new__(cls)
        job._ctx, job._worker, job._discarded, job._moved = ctx, None, False, False
        job.id, job.name, job.data, job.opts = job_id, name, data, opts
        job.timestamp, job.attempts_made, job.max_attempts = timestamp, 0, attempts
        job.delay, job.priority = delay, priority
        job.state = "delayed" if delay else ("prioritized" if priority else "waiting")
        job.processed_on = job.finished_on = job.returnvalue = None
        job.failed_reason = job.stacktrace = job.parent_id = job.entry_id = None
        job.progress, job.expire_at, job.revoked, job.stalled_count = 0, None, False, 0
        return job

    def __repr__(self) -> str:
        return f"<Job {self.ctx_name}:{self.id} {self.name!r} {self.state}>"

    @property
    def ctx_name(self) -> str:
        """Name of the job's queue."""
        return self._ctx.name

    @property
    def queue_name(self) -> str:
        """Name of the job's queue."""
        return self._ctx.name

    @property
    def discarded(self) -> bool:
        """True after `discard()`: a failure of this run will not be retried."""
        return self._discarded

    # -- lifecycle -------------------------------------------------------------------------

    async def log(self, message: str) -> int:
        """Append a line to the job's log; returns the log's length."""
        keys = self._ctx.keys
        n = await self._ctx.fcall("glidemq_log", [keys.job(self.id), keys.log(self.id)], [message])
        if n == 0:
            raise JobNotFoundError(self._ctx.name, self.id)
        return int(n)

    async def update_progress(self, progress: int | float | Mapping[str, Any]) -> None:
        """Store the job's progress and emit a `progress` event."""
        if isinstance(progress, bool) or not isinstance(progress, int | float | Mapping):
            raise ValidationError("progress", "must be a number or a mapping")
        await self._ctx.update_job(self.id, [("progress", encode_json(progress))])
        self.progress = progress
        if self._worker is not None:
            self._worker.events.emit("progress", self, progress)

    async def update_data(self, data: D) -> None:
        """Replace the job's data."""
        await self._ctx.update_job(
            self.id, [("data", encode_data(data, compress=self._ctx.compress))]
        )
        self.data = data

    def discard(self) -> None:
        """Make the current run's failure final, whatever attempts remain."""
        self._discarded = True

    async def move_to_delayed(self, timestamp_ms: int) -> None:
        """From inside a processor: put this running job back to delayed until `timestamp_ms`.

        Always raises DelayedError, which the processor should let propagate.
        """
        if self.entry_id is None or self._worker is None:
            raise JobStateError(self.id, "move to delayed", "only a running job can be delayed")
        state = await self._ctx.move_active_to_delayed(self.id, self.entry_id, timestamp_ms)
        if state in ("stale", "missing"):
            raise JobStateError(self.id, "move to delayed", "the worker no longer owns it")
        self._moved = True
        self.state = state
        raise DelayedError(f"job {self.id} moved to delayed until {timestamp_ms}")

    async def move_to_failed(self, error: BaseException) -> None:
        """From inside a processor: fail this run now with `error` (retries still apply)."""
        if self._worker is None or self.entry_id is None:
            raise JobStateError(self.id, "move to failed", "only a running job can be failed")
        await self._worker._fail_now(self, error)
        self._moved = True

    async def remove(self) -> None:
        """Delete the job; refused while a worker runs it."""
        await self._ctx.job_operation("glidemq_removeJob", self.id, op="remove")

    async def retry(self, state: str = "failed") -> None:
        """Send a finished job (`failed` or `completed`) back to waiting with fresh attempts."""
        source = {"failed": "failed", "completed": "completed", "dead_letter": "dlq"}.get(state)
        if source is None:
            raise ValidationError(
                "state", f"can retry failed, completed or dead_letter, not {state!r}"
            )
        if await self._ctx.retry_jobs(source, 1, [self.id]) != 1:
            if await self._ctx.get_state(self.id) is None:
                raise JobNotFoundError(self._ctx.name, self.id)
            raise JobStateError(self.id, "retry", f"it is not {state}")

    async def change_priority(self, priority: int) -> None:
        """Re-prioritize a job that is not running yet."""
        from .types import MAX_PRIORITY

        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValidationError("priority", "must be an integer")
        if not 0 <= priority <= MAX_PRIORITY:
            raise ValidationError("priority", f"must be between 0 and {MAX_PRIORITY}")
        self.state = await self._ctx.job_operation(
            "glidemq_changePriority", self.id, str(priority), str(now_ms()), op="change priority"
        )
        self.priority = priority

    async def change_delay(self, delay: int) -> None:
        """Set a delayed job's remaining delay to `delay` ms from now."""
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise ValidationError("delay", "must be an integer >= 0")
        self.state = await self._ctx.job_operation(
            "glidemq_changeDelay", self.id, str(delay), str(now_ms()), op="change delay"
        )
        self.delay = delay

    async def promote(self) -> None:
        """Make a delayed job runnable now."""
        self.state = await self._ctx.job_operation(
            "glidemq_promoteJob", self.id, str(now_ms()), op="promote"
        )

    # -- queries ---------------------------------------------------------------------------

    async def get_state(self) -> JobState:
        """The job's current state on the server."""
        state = await self._ctx.get_state(self.id)
        if state is None:
            raise JobNotFoundError(self._ctx.name, self.id)
        self.state = state
        return state

    async def is_completed(self) -> bool:
        return await self.get_state() == "completed"

    async def is_failed(self) -> bool:
        return await self.get_state() == "failed"

    async def is_delayed(self) -> bool:
        return await self.get_state() == "delayed"

    async def is_active(self) -> bool:
        return await self.get_state() == "active"

    async def is_waiting(self) -> bool:
        return await self.get_state() in ("waiting", "prioritized")

    async def is_revoked(self) -> bool:
        revoked = await self._ctx.command(
            self._ctx.client.hget(self._ctx.keys.job(self.id), "revoked")
        )
        return bool(revoked == b"1")

    async def refresh(self) -> Job[D, R]:
        """Re-read every field from the server."""
        fields = await self._ctx.get_fields(self.id)
        if fields is None:
            raise JobNotFoundError(self._ctx.name, self.id)
        fresh: Job[D, R] = Job(self._ctx, fields)
        for name in Job.__slots__:
            if not name.startswith("_"):
                setattr(self, name, getattr(fresh, name))
        return self

    async def wait_until_finished(
        self, poll_interval: float = 0.05, timeout: float | None = None
    ) -> JobState:
        """Wait until the job completed or failed; returns that state, refreshes the fields.

        Raises JobTimeoutError when `timeout` seconds pass first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = await self.get_state()
            if state in FINISHED:
                await self.refresh()
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeoutError(f"job {self.id} still {state} after {timeout} s")
            await asyncio.sleep(poll_interval)
