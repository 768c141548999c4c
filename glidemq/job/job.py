"""A job: its fields as stored in the job hash, and the operations on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NoReturn, Protocol, TypeVar

import orjson

from ..client.context import QueueContext
from ..encoding.serialize import decode_data, decode_json, encode_data, encode_progress
from ..errors import (
    DelayedError,
    DurabilityError,
    JobNotFoundError,
    JobStateError,
    JobTimeoutError,
    SuspendedError,
    ValidationError,
    WaitingChildrenError,
)
from ..options.usage import TokenLimiter, Usage, check_usage, parse_usage
from ..wire import codes, features, fetch, ops
from . import children, signals, waits
from .checks import (
    check_delay,
    check_next_step,
    check_priority,
    check_progress,
    check_run_at,
    retry_source,
)
from .signals import Signal, parse_signals
from .steps import Step, StepLog, check_runnable, parse_steps

if TYPE_CHECKING:
    from ..keys import QueueKeys
    from .flowview import Dependencies

__all__ = ["Job", "JobRunner", "JobState"]


class _Events(Protocol):
    def emit(self, event: str, *args: Any) -> None: ...


class JobRunner(Protocol):
    """What a job reads of the worker running it (`glidemq.worker.link.WorkerLink` is one)."""

    @property
    def events(self) -> _Events: ...
    @property
    def consumer(self) -> str: ...
    @property
    def emit_flag(self) -> str: ...
    @property
    def token_limiter(self) -> TokenLimiter | None: ...

    @property
    def fail_now(self) -> Callable[[Job[Any, Any], BaseException], Awaitable[None]]: ...


D = TypeVar("D")
R = TypeVar("R")
_T = TypeVar("_T")

JobState = str
"""One of: waiting, active, delayed, prioritized, completed, failed, waiting-children,
group-waiting, rate-limited (the wire protocol's states)."""

FINISHED = ("completed", "failed", "dead_letter")


def _int(value: bytes | None, default: int = 0) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def _opt_int(value: bytes | None) -> int | None:
    return None if value is None else _int(value)


def _failures(raw: bytes | None) -> list[dict[str, Any]]:
    """The job's `failures` field (a JSON array of tries), [] when absent or unreadable."""
    if not raw:
        return []
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # the server cuts each traceback at a byte count, maybe inside a character
            value = orjson.loads(raw.decode("utf-8", errors="replace"))
        except orjson.JSONDecodeError:
            return []
    if isinstance(value, dict):  # cjson writes a one-item array the same; guard anyway
        value = [value]
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _str(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


def _stored_text(raw: bytes | str | None) -> str | None:
    """A field's stored bytes as text, for a reader to show when they cannot be decoded."""
    if raw is None or isinstance(raw, str):
        return raw
    return raw.decode(errors="replace")


def _problem(before: str | None, field: str, exc: BaseException) -> str:
    """`decode_error` with one more field that could not be decoded."""
    text = f"{field}: {type(exc).__name__}: {exc}"
    return text if before is None else f"{before}; {text}"


class Job(Generic[D, R]):
    """A job read from the server. Fields mirror the job hash; methods act on the server.

    Fields: `id`, `name`, `data` (decoded), `opts` (as stored), `state` (as read;
    `get_state()` reads it again), `progress`, `returnvalue`, `failed_reason` and
    `stacktrace` (of the last failed try), `attempts_made`, `max_attempts`, `stalled_count`,
    `timestamp`, `processed_on`, `finished_on` (added, last started, finished; ms), `delay`,
    `priority`, `expire_at` (the ttl deadline, ms), `parent_id`, `group_key`,
    `ordering_key`, `revoked`, `step`, `cost` (tokens), `usage`, `signals` and `entry_id`
    (its stream entry while waiting or active).
    """

    __test__ = False  # glidemq.testing names it TestJob: not a pytest test class

    __slots__ = (
        "_ctx",
        "_discarded",
        "_moved",
        "_worker",
        "attempts_made",
        "cost",
        "data",
        "decode_error",
        "delay",
        "entry_id",
        "expire_at",
        "failed_reason",
        "failures",
        "finished_on",
        "group_key",
        "id",
        "max_attempts",
        "name",
        "opts",
        "ordering_key",
        "parent_id",
        "priority",
        "processed_on",
        "progress",
        "returnvalue",
        "revoked",
        "signals",
        "stacktrace",
        "stalled_count",
        "state",
        "step",
        "steps",
        "timestamp",
        "usage",
    )

    def __init__(
        self,
        ctx: QueueContext,
        fields: Mapping[bytes, bytes],
        *,
        entry_id: str | None = None,
        worker: JobRunner | None = None,
    ) -> None:
        self._ctx = ctx
        self._worker = worker
        self._discarded = False
        self._moved = False
        g = fields.get
        self.id: str = g(b"id", b"").decode(errors="replace")
        self.name: str = g(b"name", b"").decode(errors="replace")
        self.decode_error: str | None = None
        """Why the stored data or options could not be decoded (then `data` is the stored
        text as a string and `opts` is {}); None for a well-formed job."""
        raw = g(b"data")
        try:
            self.data: D = decode_data(raw)
        except Exception as exc:  # any producer can store anything: readers must not fail
            self.data = _stored_text(raw)  # type: ignore[assignment]
            self.decode_error = _problem(None, "data", exc)
        raw_opts = g(b"opts")
        try:
            opts = orjson.loads(raw_opts) if raw_opts and raw_opts != b"{}" else {}
            if not isinstance(opts, dict):
                raise TypeError(f"a JSON object was expected, not {type(opts).__name__}")
        except Exception as exc:
            opts = {}
            self.decode_error = _problem(self.decode_error, "opts", exc)
        self.opts: dict[str, Any] = opts
        self.timestamp: int = _int(g(b"timestamp"))
        self.attempts_made: int = _int(g(b"attemptsMade"))
        self.max_attempts: int = _int(g(b"maxAttempts"))
        self.delay: int = _int(g(b"delay"))
        self.priority: int = _int(g(b"priority"))
        self.state: JobState = g(b"state", b"unknown").decode(errors="replace")
        self.processed_on: int | None = _opt_int(g(b"processedOn"))
        self.finished_on: int | None = _opt_int(g(b"finishedOn"))
        rv = g(b"returnvalue")
        self.returnvalue: R | None = decode_json(rv) if rv is not None else None
        self.failed_reason: str | None = _str(g(b"failedReason"))
        self.stacktrace: str | None = _str(g(b"stacktrace"))
        self.failures: list[dict[str, Any]] = _failures(g(b"failures"))
        """The last failed tries, oldest first: attempt, at (ms), reason, stack, logs (the
        job's log length when the try ended)."""
        pr = g(b"progress")
        self.progress: Any = decode_json(pr) if pr is not None else 0
        self.parent_id: str | None = _str(g(b"parentId"))
        self.expire_at: int | None = _opt_int(g(b"expireAt"))
        self.revoked: bool = g(b"revoked") == b"1"
        self.stalled_count: int = _int(g(b"stalledCount"))
        # group (ordering keys included); ordering_key: set when it runs jobs one at a time
        self.group_key: str | None = _str(g(b"groupKey"))
        self.ordering_key: str | None = _str(g(b"orderingKey"))
        cost = g(b"cost")  # millitokens on the wire, tokens here; None: the default, 1
        self.cost: float | None = _int(cost) / 1000 if cost is not None else None
        self.step: str | None = _str(g(b"step"))
        self.entry_id: str | None = entry_id or _str(g(b"sid"))
        try:
            self.usage: Usage | None = parse_usage(g(b"usage"))
        except (TypeError, ValueError, AttributeError) as exc:
            self.usage = None
            self.decode_error = _problem(self.decode_error, "usage", exc)
        try:
            self.signals: list[Signal] = parse_signals(g(b"signals"))
        except (TypeError, ValueError, AttributeError) as exc:
            self.signals = []
            self.decode_error = _problem(self.decode_error, "signals", exc)
        self.steps: list[Step] = [] if g(b"wfLen") is None else parse_steps(fields)
        """A workflow's history (glidemq.durable), oldest first; [] for other jobs."""

    @property
    def queue_keys(self) -> QueueKeys:
        """The keys of the job's queue."""
        return self._ctx.keys

    @property
    def moved(self) -> bool:
        """Whether the processor moved this run elsewhere (failed, delayed, suspended,
        waiting for children): the worker records no outcome for it."""
        return self._moved

    @classmethod
    def created(
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
        job.failures = []
        job.progress, job.revoked, job.stalled_count = 0, False, 0
        ttl = opts.get("ttl")  # the server stores expireAt = timestamp + ttl (ttl > 0)
        job.expire_at = timestamp + ttl if isinstance(ttl, int) and ttl > 0 else None
        key = opts.get("orderingKey", opts.get("groupKey"))
        job.group_key, job.cost = key, opts.get("cost")
        strict = opts.get("groupConcurrency", 1) == 1 and "groupWeight" not in opts
        job.ordering_key = key if strict else None
        job.step = job.usage = job.decode_error = None
        job.signals, job.steps = [], []
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
    def current_fallback(self) -> dict[str, Any] | None:
        """The entry of the `fallbacks` option this try uses: None on the first try, entry n
        after n failed tries (the last entry past the chain's end)."""
        from ..options.fallbacks import current_fallback

        return current_fallback(self.opts, self.attempts_made)

    @property
    def discarded(self) -> bool:
        """True after `discard()`: a failure of this run will not be retried."""
        return self._discarded

    # -- lifecycle -------------------------------------------------------------------------

    async def _named(self, call: Awaitable[_T]) -> _T:
        """`call`, a DurabilityError from it naming this job."""
        try:
            return await call
        except DurabilityError as exc:
            raise exc.naming([self.id]) from None

    async def log(self, message: str) -> int:
        """Append a line to the job's log; returns the log's length."""
        return await self._named(ops.log(self._ctx, self.id, [message]))

    async def update_progress(self, progress: int | float | Mapping[str, Any]) -> None:
        """Store the job's progress and emit a `progress` event."""
        check_progress(progress)
        await self._named(
            ops.update_job(self._ctx, self.id, [("progress", encode_progress(progress))])
        )
        self.progress = progress
        if self._worker is not None:
            self._worker.events.emit("progress", self, progress)

    async def update_data(self, data: D) -> None:
        """Replace the job's data. From its processor: while this run holds the job. From
        anywhere else: only while no worker has taken it (waiting, delayed, prioritized,
        parked by its group or flow); JobStateError once a worker fetched it (running or
        held) or it finished. The server checks the state in the same call that writes."""
        raw = encode_data(data, compress=self._ctx.compress, serializer=self._ctx.serializer)
        runner = self._worker
        if runner is not None and self.entry_id is not None:  # this run's own job
            await self._named(
                ops.update_data(self._ctx, self.id, raw, self.entry_id, runner.consumer)
            )
        else:
            await self._named(ops.update_data(self._ctx, self.id, raw))
        self.data = data

    async def report_usage(
        self,
        *,
        model: str | None = None,
        provider: str | None = None,
        tokens: Mapping[str, int] | None = None,
        costs: Mapping[str, float] | None = None,
        latency_ms: int | None = None,
    ) -> Usage:
        """Record one model call: its tokens by kind (`{"input": 120, "output": 40}`), its
        costs by kind (`{"total": 0.002}`) and latency. Adds to `job.usage` and to the
        queue's usage summary; returns the job's usage so far."""
        args = check_usage(model, provider, tokens, costs, latency_ms)
        limiter = self._token_limiter()
        per_minute = (limiter.max_tokens, limiter.duration_ms) if limiter else None
        reply = await features.report_usage(
            self._ctx, self.id, self._ctx.now_ms(), *args, per_minute
        )
        usage = parse_usage(reply)
        if usage is None:
            raise JobNotFoundError(self._ctx.name, self.id)
        self.usage = usage
        return usage

    def _token_limiter(self) -> TokenLimiter | None:
        worker = self._worker
        return worker.token_limiter if worker is not None else None

    async def stream(self, chunk: Any) -> str:
        """Append `chunk` (anything JSON-serializable, typically a piece of a model's output)
        to this job's stream, which `Queue.read_stream` and `Queue.stream_job` read; returns
        its entry id."""
        from .streams import STREAM_MAX_LEN, STREAM_TTL_MS, encode_chunk, stream_key

        raw = encode_chunk(chunk)
        stream = stream_key(self._ctx.keys, self.id)
        entry = await features.stream_chunk(
            self._ctx, self.id, stream, STREAM_MAX_LEN, STREAM_TTL_MS, raw
        )
        if entry is None:
            raise JobNotFoundError(self._ctx.name, self.id)
        return entry

    async def suspend(self, reason: str | None = None, timeout_ms: int | None = None) -> None:
        """From inside a processor: end this run and wait, in state `suspended`, until
        `Queue.signal` wakes the job (it runs again, the signal in `job.signals`) or
        `timeout_ms` passes (it fails). Raises SuspendedError, which the processor should
        let propagate."""

        runner = self._worker
        emit_flag = runner.emit_flag if runner is not None else None
        try:
            await signals.suspend(self.id, self.entry_id, self._ctx, emit_flag, reason, timeout_ms)
        except SuspendedError:
            self._moved, self.state = True, "suspended"
            raise

    def step_log(self) -> StepLog:
        """From inside a processor: the calls a workflow (glidemq.durable) makes to record
        its steps on this job. JobStateError when no worker runs the job."""
        runner = self._worker
        entry_id = check_runnable(self.id, self.entry_id, runner is not None)
        assert runner is not None
        return StepLog(self._ctx, self.id, entry_id, runner.emit_flag, self._moved_by_step)

    def _moved_by_step(self, state: str) -> None:
        self._moved, self.state = True, state

    def discard(self) -> None:
        """Make the current run's failure final, whatever attempts remain."""
        self._discarded = True

    async def move_to_delayed(self, timestamp_ms: int, next_step: str | None = None) -> None:
        """From inside a processor: put this running job back to delayed until `timestamp_ms`.
        With `next_step`, the next run sees it as `job.step` (step jobs); without, the step
        stays as it is.

        Always raises DelayedError, which the processor should let propagate.
        """
        check_next_step(next_step)
        check_run_at(timestamp_ms, self._ctx.now_ms())
        if self.entry_id is None or self._worker is None:
            raise JobStateError(self.id, "move to delayed", "only a running job can be delayed")
        state = await fetch.move_active_to_delayed(
            self._ctx, self._ctx.now_ms(), self.id, self.entry_id, timestamp_ms, next_step or ""
        )
        self._moved_to_delayed(state, timestamp_ms, next_step)

    def _moved_to_delayed(self, state: str, timestamp_ms: int, next_step: str | None) -> NoReturn:
        """The engine answered a move to delayed with `state`: update this snapshot, then
        raise DelayedError for the processor to let propagate."""
        if state in ("stale", "missing"):
            raise JobStateError(self.id, "move to delayed", "the worker no longer owns it")
        if state == codes.BAD_OPTION:
            raise ValidationError("timestamp_ms", "beyond the longest delay the server accepts")
        self._moved = True
        self.state = state
        if next_step is not None:
            self.step = next_step
        raise DelayedError(f"job {self.id} moved to delayed until {timestamp_ms}")

    # -- flows (docs/WORKFLOWS.md) ---------------------------------------------------------

    async def move_to_waiting_children(self) -> None:
        """From inside a processor: stop running until this job's pending children finished;
        it runs again after the last one. Returns when none is pending (go on); otherwise
        raises WaitingChildrenError, which the processor should let propagate."""
        try:
            await children.move_to_waiting_children(
                self._ctx, self.id, self.entry_id, self._worker is not None
            )
        except WaitingChildrenError:
            self._moved, self.state = True, "waiting-children"
            raise

    async def get_children_values(self) -> dict[str, Any]:
        """Return values of this job's completed children, by `"<queue>:<id>"`."""
        return await children.children_values(self._ctx, self.id)

    async def get_ignored_children_failures(self) -> dict[str, str]:
        """Failure reasons of children failed with `ignore_dependency_on_failure`, by
        `"<queue>:<id>"`."""
        return await children.ignored_failures(self._ctx, self.id)

    async def get_children_failures(self) -> dict[str, str]:
        """Failure reasons recorded for this job's children, by `"<queue>:<id>"`: those
        failed with `ignore_dependency_on_failure` or `continue_parent_on_failure`, and the
        child whose failure failed this job."""
        return await children.children_failures(self._ctx, self.id)

    async def get_dependencies(
        self, *, processed: bool = True, unprocessed: bool = True
    ) -> Dependencies:
        """This job's children: completed ones with their values and recorded failures
        (`processed`), pending ones (`unprocessed`), and the count of each."""
        from .flowview import read_dependencies

        return await read_dependencies(self._ctx, self.id, processed, unprocessed)

    async def get_parents(self) -> list[tuple[str, str]]:
        """(queue name, job id) of every flow parent of this job; empty for none."""
        from .flowview import read_parents

        return await read_parents(self._ctx, self.id)

    async def move_to_failed(self, error: BaseException) -> None:
        """From inside a processor: fail this run now with `error` (retries still apply)."""
        if self._worker is None or self.entry_id is None:
            raise JobStateError(self.id, "move to failed", "only a running job can be failed")
        await self._worker.fail_now(self, error)
        self._moved = True

    async def remove(self) -> None:
        """Delete the job; refused while a worker runs it."""
        await self._named(ops.remove_job(self._ctx, self.id))

    async def retry(self, state: str = "failed") -> None:
        """Send a finished job (`failed` or `completed`) back to waiting with fresh attempts."""
        source = retry_source(state)
        retried = ops.retry_jobs(self._ctx, self._ctx.now_ms(), source, 1, [self.id])
        if await self._named(retried) != 1:
            if await self._ctx.get_state(self.id) is None:
                raise JobNotFoundError(self._ctx.name, self.id)
            raise JobStateError(self.id, "retry", f"it is not {state}")

    async def change_priority(self, priority: int) -> None:
        """Re-prioritize a job that is not running yet."""
        check_priority(priority)
        self.state = await self._named(
            ops.change_priority(self._ctx, self.id, priority, self._ctx.now_ms())
        )
        self.priority = priority

    async def change_delay(self, delay: int) -> None:
        """Set a delayed job's remaining delay to `delay` ms from now."""
        check_delay(delay)
        self.state = await self._named(
            ops.change_delay(self._ctx, self.id, delay, self._ctx.now_ms())
        )
        self.delay = delay

    async def promote(self) -> None:
        """Make a delayed job runnable now."""
        self.state = await self._named(ops.promote_job(self._ctx, self.id, self._ctx.now_ms()))

    # -- queries ---------------------------------------------------------------------------

    async def get_state(self) -> JobState:
        """The job's current state on the server: a failed job parked in the dead-letter set
        answers `dead_letter`, as `get_jobs` and `get_job_counts` count it."""
        state = await self._ctx.get_state(self.id)
        if state is None:
            raise JobNotFoundError(self._ctx.name, self.id)
        self.state = state
        return state

    # The predicates group states as JobCounts does: a job waiting for a slot of its group
    # is waiting, one held back by its group's rate limit or token bucket is delayed.

    async def is_completed(self) -> bool:
        """Whether the job completed."""
        return await self.get_state() == "completed"

    async def is_failed(self) -> bool:
        """Whether the job failed for good (dead letters included)."""
        return await self.get_state() in ("failed", "dead_letter")

    async def is_delayed(self) -> bool:
        """Whether the job waits for a time: delayed, or rate-limited by its group."""
        return await self.get_state() in ("delayed", "rate-limited")

    async def is_active(self) -> bool:
        """Whether a worker runs the job now."""
        return await self.get_state() == "active"

    async def is_waiting(self) -> bool:
        """Whether the job waits for a worker: waiting, prioritized, or group-waiting."""
        return await self.get_state() in ("waiting", "prioritized", "group-waiting")

    async def is_waiting_children(self) -> bool:
        """Whether the job (a flow parent) waits for its children to finish."""
        return await self.get_state() == "waiting-children"

    async def is_revoked(self) -> bool:
        """Whether the job was revoked (`Queue.revoke`), read from the server now: a long
        processor may check it to stop early."""
        key = self._ctx.keys.job(self.id)
        revoked = await self._ctx.command(lambda c: c.hget(key, "revoked"))
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

        Raises JobTimeoutError when `timeout` seconds pass first (saying so when no worker
        serves the queue, or it is paused), and ConnectionError when the server does not
        answer within them.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = await waits.bounded(self._ctx, self.get_state(), deadline, timeout)
            if state in FINISHED:
                await waits.bounded(self._ctx, self.refresh(), deadline, timeout)
                return state
            if deadline is not None and time.monotonic() >= deadline:
                why = await waits.unfinished_reason(self._ctx, state)
                raise JobTimeoutError(
                    f"job {self.id} of queue {self._ctx.name!r} still {state} after {timeout} s"
                    + (f": {why}" if why else "")
                )
            await asyncio.sleep(poll_interval)
