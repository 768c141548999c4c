"""WorkflowContext: what a workflow calls to take durable steps, sleep, wait for events and
start children. Every call takes the next position of the workflow's history: a position
already recorded gives back what was recorded (after checking that the same step is there),
a new one runs and is recorded by one server call (glidemq.job.steps.StepLog)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import math
import random
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import orjson

from ..encoding import payload
from ..encoding.serialize import encode_json
from ..errors import (
    EventTimeoutError,
    HistoryLimitError,
    JobStateError,
    NonDeterminismError,
    PayloadTooLargeError,
    ServerError,
    StepFailedError,
    UnrecoverableError,
    ValidationError,
    WaitingChildrenError,
)
from ..flows.plan import check_same_slot
from ..job.job import Job
from ..job.steps import MAX_HISTORY_BYTES, MAX_STEP_RESULT, MAX_STEPS, Step
from ..keys import QueueKeys
from ..processor import is_async_callable
from ..tasks import Task
from ..types import Backoff
from ..wire import codes
from ..wire.steps import StepReply
from ..worker.backoff import retry_delay

if TYPE_CHECKING:
    from ..job.steps import StepLog

__all__ = ["Parked", "WorkflowContext"]

T = TypeVar("T")

_MAX_NAME = 1024
_MAX_SECONDS = 315_360_000  # ten years, the longest delay the server takes
_ERROR_CHARS = 4000


class Parked(BaseException):
    """The run ended at a sleep, a wait, a child or a step's next attempt; the workflow goes
    on in a later run. A BaseException, so `except Exception` in a workflow lets it pass."""


@functools.lru_cache(maxsize=1024)
def _return_hint(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except Exception:  # a lambda, a builtin, a hint naming what the module lacks
        return Any


def _check_name(name: object, what: str = "name") -> str:
    if not isinstance(name, str) or not name or len(name.encode()) > _MAX_NAME:
        raise ValidationError(what, f"must be a non-empty string of at most {_MAX_NAME} bytes")
    return name


def _describe(kind: str, name: str) -> str:
    return kind if kind in ("sleep", "now", "random") and name == kind else f"{kind} {name!r}"


def _reason(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:_ERROR_CHARS]


def _backoff_wire(backoff: Backoff | int | Mapping[str, Any] | None) -> Any:
    """A step's backoff as the retry delay reads it (the job option's wire form)."""
    if backoff is None or isinstance(backoff, Mapping):
        return backoff
    if isinstance(backoff, Backoff):
        if backoff.type not in ("fixed", "exponential"):
            raise ValidationError("backoff.type", "a step's backoff is fixed or exponential")
        return {"type": backoff.type, "delay": backoff.delay, "jitter": backoff.jitter}
    if isinstance(backoff, bool) or not isinstance(backoff, int) or backoff < 0:
        raise ValidationError("backoff", "must be a Backoff or a delay in ms (an int >= 0)")
    return backoff


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a step's function: a coroutine function on the loop, anything else on a thread."""
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


class WorkflowContext:
    """The running workflow's handle, its first argument. `job` is the workflow's job;
    every method is awaited and takes the next position of the history, so a workflow must
    call them in the same order on every run (branch only on values they returned)."""

    def __init__(self, job: Job[Any, Any]) -> None:
        self.job = job
        try:
            self._log: StepLog = job.step_log()
        except JobStateError as exc:
            raise UnrecoverableError(
                f"workflow {job.id}: only the worker that runs it records its steps "
                f"(a workflow cannot run in a sandbox child): {exc}"
            ) from exc
        self._history: dict[int, Step] = {s.position: s for s in job.steps}
        self._position = 0
        self._parked: str | None = None
        self._attempts = max(1, job.max_attempts or int(job.opts.get("attempts", 1) or 1))
        self._backoff = job.opts.get("backoff")

    def __repr__(self) -> str:
        return f"<WorkflowContext {self.job.queue_name}:{self.job.id} at {self._position}>"

    @property
    def workflow_id(self) -> str:
        """The workflow's job id (what `Workflow.signal` takes)."""
        return self.job.id

    @property
    def replaying(self) -> bool:
        """Whether the next call gives back a recorded result instead of running."""
        return self._position + 1 in self._history

    def close(self) -> None:
        """The run is over: every further call ends it (raises Parked)."""
        if self._parked is None:
            self._parked = "ended"

    # -- the history -----------------------------------------------------------------------

    def _take(self, kind: str, name: str) -> tuple[int, Step | None]:
        """The next position and what is recorded there; NonDeterminismError when another
        step is."""
        if self._parked is not None:
            raise Parked(self._parked)
        self._position += 1
        pos = self._position
        step = self._history.get(pos)
        if step is not None and (step.kind != kind or step.name != name):
            raise NonDeterminismError(
                self.job.id, pos, _describe(step.kind, step.name), _describe(kind, name)
            )
        if step is None and pos > MAX_STEPS:
            raise HistoryLimitError(self.job.id, f"{MAX_STEPS} entries", pos)
        return pos, step

    def _outcome(self, reply: StepReply, kind: str, name: str) -> StepReply:
        """The reply of a step call, or the error it means; parks the run when it moved."""
        status, detail = reply
        if status in ("delayed", "waiting", "prioritized", "suspended", "waiting-children"):
            self._parked = status
            raise Parked(f"{_describe(kind, name)}: {status}")
        if status in ("ok", "received", "timeout"):
            return reply
        job_id = self.job.id
        if status in ("stale", "missing"):
            self._parked = status
            raise JobStateError(job_id, "record a step", "the worker no longer owns it")
        if status in ("nondeterminism", "recorded"):
            try:
                meta = orjson.loads(detail)
                recorded = _describe(str(meta.get("k")), str(meta.get("n")))
            except (orjson.JSONDecodeError, AttributeError):
                recorded = detail.decode(errors="replace")
            reached = _describe(kind, name) + (" again" if status == "recorded" else "")
            raise NonDeterminismError(job_id, self._position, recorded, reached)
        if status == "history-full":
            raise HistoryLimitError(job_id, f"{MAX_STEPS} entries", self._position)
        if status == "too-large":
            raise HistoryLimitError(job_id, f"{MAX_HISTORY_BYTES} bytes", int(detail or 0))
        refused = codes.input_refusal(status, self.job.queue_name)
        raise refused if refused is not None else ServerError(f"{kind} {name!r}: {status}")

    # -- steps -----------------------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]] | Callable[..., T],
        /,
        *args: Any,
        attempts: int | None = None,
        backoff: Backoff | int | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> T:
        """Run `fn(*args, **kwargs)` (sync on a thread, async on the loop) once: its result
        (JSON, checked and decoded by its return annotation as task arguments are) is
        recorded before this returns, and a rerun gives it back without calling `fn`.

        A failure is retried up to `attempts` tries in all (default: the workflow's own
        `attempts`) after `backoff` (default: the workflow's), each retry in a later run that
        holds no worker while it waits; then, or at once for UnrecoverableError, it raises
        StepFailedError. A crash inside `fn` runs it again: steps are at least once."""
        _check_name(name)
        if not callable(fn):
            raise ValidationError("fn", f"{fn!r} is not callable")
        limit = self._attempts if attempts is None else attempts
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("attempts", "must be an integer >= 1")
        policy = self._backoff if backoff is None else _backoff_wire(backoff)
        hint = _return_hint(fn)
        pos, rec = self._take("step", name)
        made, started = 0, None
        if rec is not None:
            if rec.status == "done":
                return typing.cast(T, payload.decode(rec.result, hint, f"{name}.return"))
            if rec.status == "failed":
                raise StepFailedError(name, rec.error or "failed", rec.attempts)
            if rec.status == "retrying":
                made, started = rec.attempts, rec.started_at
        started = started or self._log.now_ms()
        try:
            value = await _call(fn, args, kwargs)
        except Exception as exc:  # BaseExceptions (cancellation, exit) end the run as they are
            await self._failed_try(pos, name, made + 1, limit, policy, started, exc)
        return typing.cast(T, await self._done(pos, name, made + 1, started, value, hint))

    async def _failed_try(
        self,
        pos: int,
        name: str,
        made: int,
        limit: int,
        policy: Any,
        started: int,
        exc: Exception,
    ) -> NoReturn:
        reason = _reason(exc)
        delay = -1
        if made < limit and not isinstance(exc, UnrecoverableError):
            try:
                delay = retry_delay(policy, made, exc, {})
            except KeyError:  # the workflow's backoff names a worker's custom strategy
                delay = 0
        if delay < 0:
            reply = await self._log.record(pos, name, "step", "failed", made, started, b"", reason)
            self._outcome(reply, "step", name)
            raise StepFailedError(name, reason, made) from exc
        run_at = self._log.now_ms() + delay
        reply = await self._log.record(
            pos, name, "step", "retrying", made, started, b"", reason, run_at
        )
        self._outcome(reply, "step", name)
        raise ServerError(f"step {name!r}: a retry was recorded but the job did not move")

    async def _done(
        self, pos: int, name: str, made: int, started: int, value: Any, hint: Any
    ) -> Any:
        try:
            raw = encode_json(payload.encode(value, hint, f"{name}.return"), f"{name}.return")
        except (TypeError, ValidationError) as exc:
            reason = f"the result is not JSON: {_reason(exc)}"
            reply = await self._log.record(pos, name, "step", "failed", made, started, b"", reason)
            self._outcome(reply, "step", name)
            raise StepFailedError(name, reason, made) from exc
        if len(raw) > MAX_STEP_RESULT:
            reason = str(PayloadTooLargeError(len(raw), MAX_STEP_RESULT, f"{name}.return"))
            reply = await self._log.record(pos, name, "step", "failed", made, started, b"", reason)
            self._outcome(reply, "step", name)
            raise HistoryLimitError(self.job.id, f"{MAX_STEP_RESULT} bytes a result", len(raw))
        reply = await self._log.record(pos, name, "step", "done", made, started, raw)
        self._outcome(reply, "step", name)
        return payload.decode(orjson.loads(raw), hint, f"{name}.return")

    # -- time ------------------------------------------------------------------------------

    async def sleep(self, seconds: float, *, name: str = "sleep") -> None:
        """Wait `seconds`: the run ends and the workflow runs again after that time (a
        delayed job: no worker slot, no lock), also when every worker restarted meanwhile.
        `Job.promote` ends a sleep early."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or not 0 <= seconds <= _MAX_SECONDS
        ):
            raise ValidationError("seconds", f"must be a number from 0 to {_MAX_SECONDS}")
        await self._sleep(name, lambda now: now + round(seconds * 1000))

    async def sleep_until(self, when: dt.datetime, *, name: str = "sleep") -> None:
        """Sleep until `when` (a timezone-aware datetime); at once when it has passed."""
        if not isinstance(when, dt.datetime) or when.tzinfo is None:
            raise ValidationError("when", "must be a timezone-aware datetime")
        at = int(when.timestamp() * 1000)
        await self._sleep(name, lambda now: at)

    async def _sleep(self, name: str, until: Callable[[int], int]) -> None:
        _check_name(name)
        pos, rec = self._take("sleep", name)
        if rec is not None:
            return  # recorded: this run began after it
        reply = await self._log.sleep(pos, name, max(0, until(self._log.now_ms())))
        self._outcome(reply, "sleep", name)

    async def now(self) -> dt.datetime:
        """The time (UTC) when the workflow first got here: the same on every replay."""
        pos, rec = self._take("now", "now")
        if rec is not None and isinstance(rec.result, int):
            ms = rec.result
        else:
            ms = self._log.now_ms()
            reply = await self._log.record(pos, "now", "now", "done", 1, ms, str(ms).encode())
            self._outcome(reply, "now", "now")
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)

    async def random(self) -> float:
        """A random float in [0, 1): drawn once, the same on every replay."""
        pos, rec = self._take("random", "random")
        if rec is not None and isinstance(rec.result, float | int):
            return float(rec.result)
        value = random.random()
        started = self._log.now_ms()
        reply = await self._log.record(
            pos, "random", "random", "done", 1, started, orjson.dumps(value)
        )
        self._outcome(reply, "random", "random")
        return value

    # -- events ----------------------------------------------------------------------------

    async def wait_for_event(self, name: str, timeout: float | None = None) -> Any:
        """The data of the next event `name` sent to this workflow (`Workflow.signal`,
        `Queue.signal`); one sent before the workflow got here was kept for it. Until it
        comes the workflow is suspended (no worker slot). After `timeout` seconds without
        it, raises EventTimeoutError here (catchable)."""
        _check_name(name)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or not 0 < timeout <= _MAX_SECONDS
        ):
            raise ValidationError("timeout", f"must be a number of seconds up to {_MAX_SECONDS}")
        pos, rec = self._take("event", name)
        if rec is not None:
            if rec.status == "done":
                return rec.result
            if rec.status == "timeout":
                raise EventTimeoutError(name, timeout)
            deadline = rec.until or 0  # waiting: the run began before the event came
        else:
            deadline = 0 if timeout is None else self._log.now_ms() + round(timeout * 1000)
        status, detail = self._outcome(await self._log.wait(pos, name, deadline), "event", name)
        if status == "timeout":
            raise EventTimeoutError(name, timeout)
        return orjson.loads(detail)

    # -- children --------------------------------------------------------------------------

    async def child(self, target: Task[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run task (or workflow) `target` with these arguments as a child job and return
        its result; the workflow waits in waiting-children meanwhile (no worker slot). Its
        failure raises StepFailedError here. In a cluster its queue must share the
        workflow's slot (CrossSlotError)."""
        if not isinstance(target, Task):
            raise ValidationError("target", f"{target!r} is not a glidemq task or workflow")
        name = target.name
        pos, rec = self._take("child", name)
        if rec is not None:
            return await self._child_again(target, rec)
        data = orjson.dumps(target.payload(*args, **kwargs))
        if len(data) > MAX_STEP_RESULT:
            raise PayloadTooLargeError(len(data), MAX_STEP_RESULT)
        opts = replace(
            target.options,
            continue_parent_on_failure=True,
            ignore_dependency_on_failure=False,
            remove_dependency_on_failure=False,
            job_id=None,
            deduplication=None,
        )
        keys = QueueKeys(target.queue, self.job.queue_keys.prefix)
        if self._log.in_cluster:
            check_same_slot([self.job.queue_name, target.queue])
        spec = (
            name,
            data,
            orjson.dumps(opts.to_wire()),
            opts.delay,
            opts.priority,
            opts.attempts,
            opts.ttl,
        )
        reply = await self._log.child(pos, name, keys, spec)
        self._outcome(reply, "child", name)
        raise ServerError(f"child {name!r}: started, but the workflow did not move")

    async def _child_again(self, target: Task[..., T], rec: Step) -> T:
        if rec.status == "done":
            return target.result_of(rec.result)
        if rec.status == "failed":
            raise StepFailedError(rec.name, rec.error or "the child failed", 1)
        try:
            await self.job.move_to_waiting_children()  # woken early: still pending?
        except WaitingChildrenError:
            self._parked = "waiting-children"
            raise Parked(f"child {rec.name!r}: waiting-children") from None
        raise StepFailedError(rec.name, f"child {rec.child} was removed before it finished", 1)
