"""SandboxJob: the Job a processor sees in a sandbox child.

It is a `Job` (same fields, same methods, `isinstance(job, Job)` holds), but the child has no
connection: every method that needs the server is sent to the parent, which runs it on the
real Job with its own connection and sends back the result or the error.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from ..encoding.serialize import encode_json
from ..errors import DelayedError, SuspendedError, ValidationError
from ..job.flowview import Dependencies
from ..job.job import Job, JobState
from ..job.signals import Signal, check_suspend
from ..job.streams import encode_chunk
from ..options.usage import Usage, check_usage
from .protocol import error_to_wire

__all__ = ["PROXIED_METHODS", "SandboxJob", "job_fields", "job_to_wire"]

D = TypeVar("D")
R = TypeVar("R")

PROXIED_METHODS = frozenset(
    {
        "log",
        "update_progress",
        "update_data",
        "discard",
        "move_to_delayed",
        "move_to_failed",
        "remove",
        "retry",
        "change_priority",
        "change_delay",
        "promote",
        "get_state",
        "is_revoked",
        "refresh",
        "report_usage",
        "stream",
        "suspend",
        "get_children_values",
        "get_ignored_children_failures",
        "get_children_failures",
        "get_dependencies",
        "get_parents",
        "move_to_waiting_children",
    }
)
"""Job methods a child may ask the parent to run; the parent refuses anything else."""

# wire name -> Job attribute, for the fields a child gets and `refresh()` updates
_FIELDS = (
    ("id", "id"),
    ("name", "name"),
    ("data", "data"),
    ("opts", "opts"),
    ("timestamp", "timestamp"),
    ("attempts_made", "attempts_made"),
    ("max_attempts", "max_attempts"),
    ("delay", "delay"),
    ("priority", "priority"),
    ("state", "state"),
    ("processed_on", "processed_on"),
    ("finished_on", "finished_on"),
    ("progress", "progress"),
    ("failed_reason", "failed_reason"),
    ("parent_id", "parent_id"),
    ("expire_at", "expire_at"),
    ("revoked", "revoked"),
    ("stalled_count", "stalled_count"),
    ("entry_id", "entry_id"),
    ("step", "step"),
    ("signals", "signals"),
)


_DEFAULTS: dict[str, Any] = {
    "id": "",
    "name": "",
    "data": None,
    "opts": {},
    "timestamp": 0,
    "attempts_made": 0,
    "max_attempts": 0,
    "delay": 0,
    "priority": 0,
    "state": "active",
    "processed_on": None,
    "finished_on": None,
    "progress": 0,
    "failed_reason": None,
    "parent_id": None,
    "expire_at": None,
    "revoked": False,
    "stalled_count": 0,
    "entry_id": None,
    "step": None,
    "signals": [],
}


def job_fields(job: Job[Any, Any]) -> dict[str, Any]:
    """The job's public fields as sent to a child."""
    out = {wire: getattr(job, attr) for wire, attr in _FIELDS}
    out["queue"] = job.queue_name
    return out


_ATTRS = tuple(attr for _, attr in _FIELDS)
_get_attrs = operator.attrgetter(*_ATTRS)


def _make_fill() -> Any:
    # One assignment per field, generated from _ATTRS: a child builds a SandboxJob per run,
    # and this is four times cheaper than a setattr loop.
    body = "".join(f"    job.{attr} = entry[{i + 2}]\n" for i, attr in enumerate(_ATTRS))
    namespace: dict[str, Any] = {}
    exec(f"def fill(job, entry):\n{body}", namespace)
    return namespace["fill"]


_fill = _make_fill()


def job_to_wire(job: Job[Any, Any], handle: int) -> list[Any]:
    """A `run` message's job entry, positional to keep the hot path small:
    [handle, queue, *fields in _FIELDS order]. Proxied calls name the job by its handle."""
    return [handle, job.queue_name, *_get_attrs(job)]


class Proxy(Protocol):
    """What a SandboxJob needs from the child's runner."""

    async def call(self, handle: int, method: str, args: list[Any]) -> Any:
        """Run Job method `method(*args)` for job `handle` in the parent; its result."""
        ...

    def notify(self, handle: int, method: str, args: list[Any]) -> None:
        """The same without waiting for (or getting) an answer."""
        ...


class SandboxJob(Job[D, R]):
    """A running job inside a sandbox child; server operations go through the parent."""

    __slots__ = ("_handle", "_proxy", "_queue")

    def __init__(self, entry: Sequence[Any] | Mapping[str, Any], proxy: Proxy) -> None:
        # Job.__init__ reads a job hash; here the fields arrive decoded, as a `job_to_wire`
        # entry (or a mapping of field names with "h" and "queue").
        self._proxy = proxy
        self._worker = None
        self._discarded = False
        self._moved = False
        self.usage = None
        self.signals = []
        self.steps = []  # workflows run in the worker process, not in a sandbox child
        if type(entry) is list and len(entry) == len(_ATTRS) + 2:  # the usual case
            self._handle = int(entry[0])
            self._queue = str(entry[1])
            _fill(self, entry)
        elif isinstance(entry, Mapping):
            self._handle = int(entry["h"])
            self._queue = str(entry.get("queue", ""))
            self._apply({**_DEFAULTS, **entry})
            return
        else:
            self._handle = int(entry[0])
            self._queue = str(entry[1])
            for attr, value in zip(_ATTRS, entry[2:], strict=True):
                setattr(self, attr, value)
        opts: Any = self.opts
        if not isinstance(opts, dict):
            self.opts = {}
        self.returnvalue = None
        self.stacktrace = None
        self._signals_from_wire()

    def _signals_from_wire(self) -> None:
        # Signals cross as dicts (orjson writes a dataclass as one).
        raw: Any = self.signals
        self.signals = [Signal(**x) if isinstance(x, dict) else x for x in raw or ()]

    def _apply(self, fields: Mapping[str, Any]) -> None:
        for wire, attr in _FIELDS:
            if wire in fields:
                setattr(self, attr, fields[wire])
        opts = fields.get("opts")
        self.opts = opts if isinstance(opts, dict) else {}
        self.returnvalue = None
        self.stacktrace = None
        self._signals_from_wire()

    def __repr__(self) -> str:
        return f"<SandboxJob {self._queue}:{self.id} {self.name!r} {self.state}>"

    @property
    def ctx_name(self) -> str:
        """Name of the job's queue."""
        return self._queue

    @property
    def queue_name(self) -> str:
        """Name of the job's queue."""
        return self._queue

    async def _call(self, method: str, *args: Any) -> Any:
        return await self._proxy.call(self._handle, method, list(args))

    # -- lifecycle (proxied) ----------------------------------------------------------------

    async def log(self, message: str) -> int:
        """Append a line to the job's log; returns the log's length."""
        return int(await self._call("log", str(message)))

    async def update_progress(self, progress: int | float | Mapping[str, Any]) -> None:
        """Store the job's progress and emit a `progress` event."""
        if isinstance(progress, bool) or not isinstance(progress, int | float | Mapping):
            raise ValidationError("progress", "must be a number or a mapping")
        await self._call("update_progress", _checked("progress", progress))
        self.progress = progress

    async def update_data(self, data: D) -> None:
        """Replace the job's data."""
        await self._call("update_data", _checked("data", data))
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
        """Record one model call (see `glidemq.Job.report_usage`); returns the job's usage."""
        model, provider, tok, cost, latency = check_usage(
            model, provider, tokens, costs, latency_ms
        )
        reply = await self._call("report_usage", model, provider, tok, cost, latency)
        self.usage = Usage(**reply)
        return self.usage

    async def stream(self, chunk: Any) -> str:
        """Append `chunk` to this job's stream (see `glidemq.Job.stream`); its entry id."""
        encode_chunk(chunk)  # the in-process errors, in the child
        return str(await self._call("stream", chunk))

    async def suspend(self, reason: str | None = None, timeout_ms: int | None = None) -> None:
        """End this run and wait for a signal (see `glidemq.Job.suspend`); raises
        SuspendedError, which the processor should let propagate."""
        check_suspend(reason, timeout_ms)
        await self._call("suspend", reason, timeout_ms)
        # The parent's Job.suspend raises; an answer without an error is a bug there.
        raise SuspendedError(f"job {self.id} suspended")

    def discard(self) -> None:
        """Make the current run's failure final, whatever attempts remain."""
        self._discarded = True
        self._proxy.notify(self._handle, "discard", [])

    async def move_to_delayed(self, timestamp_ms: int, next_step: str | None = None) -> None:
        """Put this running job back to delayed until `timestamp_ms` (the next run sees
        `next_step` as `job.step`); raises DelayedError, which the processor should let
        propagate."""
        await self._call("move_to_delayed", int(timestamp_ms), next_step)
        # The parent's Job.move_to_delayed raises; an answer without an error is a bug there.
        raise DelayedError(f"job {self.id} moved to delayed until {timestamp_ms}")

    async def move_to_failed(self, error: BaseException) -> None:
        """Fail this run now with `error` (retries still apply)."""
        await self._call("move_to_failed", error_to_wire(error))
        self._moved = True

    async def remove(self) -> None:
        """Delete the job; refused while a worker runs it (as it is now)."""
        await self._call("remove")

    async def retry(self, state: str = "failed") -> None:
        """Send a finished job back to waiting; refused for a running job."""
        await self._call("retry", state)

    async def change_priority(self, priority: int) -> None:
        """Re-prioritize a job that is not running yet (refused for this running one)."""
        await self._call("change_priority", priority)
        self.priority = priority

    async def change_delay(self, delay: int) -> None:
        """Set a delayed job's remaining delay (refused for this running one)."""
        await self._call("change_delay", delay)
        self.delay = delay

    async def promote(self) -> None:
        """Make a delayed job runnable now (refused for this running one)."""
        await self._call("promote")

    # -- queries (proxied) ------------------------------------------------------------------

    async def get_state(self) -> JobState:
        """The job's current state on the server."""
        state = str(await self._call("get_state"))
        self.state = state
        return state

    async def get_children_values(self) -> dict[str, Any]:
        """Return values of this job's completed children, by `"<queue>:<id>"`."""
        return dict(await self._call("get_children_values") or {})

    async def get_ignored_children_failures(self) -> dict[str, str]:
        """Failure reasons of children failed with `ignore_dependency_on_failure`."""
        return dict(await self._call("get_ignored_children_failures") or {})

    async def get_children_failures(self) -> dict[str, str]:
        """Failure reasons recorded for this job's children (those failed with
        `ignore_dependency_on_failure` or `continue_parent_on_failure`), by
        `"<queue>:<id>"`."""
        return dict(await self._call("get_children_failures") or {})

    async def get_dependencies(
        self, *, processed: bool = True, unprocessed: bool = True
    ) -> Dependencies:
        """This job's children: completed ones with their values and recorded failures
        (`processed`), pending ones (`unprocessed`), and the count of each."""
        got = await self._call("get_dependencies", processed, unprocessed)
        return Dependencies(**got)

    async def get_parents(self) -> list[tuple[str, str]]:
        """(queue name, job id) of every flow parent of this job; empty for none."""
        return [(str(q), str(i)) for q, i in await self._call("get_parents") or []]

    async def move_to_waiting_children(self) -> None:
        """Stop running until this job's pending children finished; returns when none is
        pending, otherwise raises WaitingChildrenError, which the processor should let
        propagate."""
        await self._call("move_to_waiting_children")

    async def is_revoked(self) -> bool:
        """Whether the job was revoked (a revoked run is also aborted by the parent)."""
        return bool(await self._call("is_revoked"))

    async def refresh(self) -> SandboxJob[D, R]:
        """Re-read every field from the server."""
        fields = await self._call("refresh")
        if isinstance(fields, dict):
            self._apply(fields)
        return self


def _checked(name: str, value: Any) -> Any:
    """Fail in the child, with the in-process error, on a value that cannot cross (the
    socket's orjson would turn NaN and Infinity into null)."""
    try:
        encode_json(value, name)
    except TypeError as exc:
        raise ValidationError(name, f"not JSON-serializable: {exc}") from None
    return value
