"""The glidemq error tree: every error the library raises on purpose is a GlideMQError."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

__all__ = [
    "BatchError",
    "ConnectionError",
    "CostExceedsCapacityError",
    "CrossSlotError",
    "CycleError",
    "DelayedError",
    "DuplicateJobError",
    "DurabilityError",
    "DurabilityTimeoutError",
    "EventTimeoutError",
    "ForeignLibraryError",
    "GlideMQError",
    "GroupFullError",
    "HistoryLimitError",
    "JobFailedError",
    "JobIdsExhaustedError",
    "JobNotFoundError",
    "JobStateError",
    "JobTimeoutError",
    "LibraryError",
    "NonDeterminismError",
    "OperationTimeoutError",
    "PayloadTooLargeError",
    "ProcessorExitError",
    "QueueClosedError",
    "QueueFullError",
    "QueueNotFoundError",
    "RateLimitError",
    "Retry",
    "SerializerMismatchError",
    "ServerError",
    "StepFailedError",
    "SuspendedError",
    "TaskArgumentError",
    "UnrecoverableError",
    "UnsupportedOptionError",
    "ValidationError",
    "WaitingChildrenError",
]


class GlideMQError(Exception):
    """Root of every error glidemq raises on purpose."""


class ValidationError(GlideMQError, ValueError):
    """An argument or option is invalid; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class PayloadTooLargeError(ValidationError):
    """Job data is larger than the limit (checked before compression, before any write)."""

    def __init__(self, size: int, limit: int, field: str = "data") -> None:
        super().__init__(field, f"serialized payload is {size} bytes, the limit is {limit}")
        self.size = size
        self.limit = limit


class UnsupportedOptionError(ValidationError):
    """An option the wire protocol names but this version does not enforce yet."""


class CostExceedsCapacityError(ValidationError):
    """A job's token cost is larger than its token bucket's capacity: it could never run.
    Amounts are in tokens (`cost`, `capacity`)."""

    def __init__(self, cost: float, capacity: float) -> None:
        super().__init__("cost", f"{cost:g} tokens exceed the token bucket capacity {capacity:g}")
        self.cost = cost
        self.capacity = capacity


class RateLimitError(GlideMQError):
    """Raised by a processor: put the job back (no attempt is counted) and, when `delay` ms
    is given, stop the whole queue's workers from starting jobs for that long (as
    `Worker.rate_limit(delay)` does)."""

    def __init__(self, delay: int = 0) -> None:
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise ValidationError("delay", f"must be an integer number of ms >= 0, got {delay!r}")
        super().__init__(delay)  # args = (delay,): rebuilt as it was across a process boundary
        self.delay = delay

    def __str__(self) -> str:
        return f"rate limited for {self.delay} ms" if self.delay else "rate limited"


class ProcessorExitError(GlideMQError):
    """A processor raised KeyboardInterrupt, SystemExit or another BaseException that is not
    an Exception. The job fails with this error (reason `processor raised NAME[: detail]`,
    the original is its `__cause__`); the worker, its event loop and other jobs go on."""

    def __init__(self, original: BaseException) -> None:
        name = type(original).__name__
        detail = str(original)
        super().__init__(
            f"processor raised {name}: {detail}" if detail else f"processor raised {name}"
        )
        self.original_type = name


class ConnectionError(GlideMQError, builtins.ConnectionError):
    """The Valkey server could not be reached or the connection was lost (also a builtin
    `ConnectionError`, so code written against the builtin catches it)."""

    REFUSED_HINT = (
        "is a Valkey server running there? Start one with glidemq-server, or point "
        "GLIDEMQ_URL (--url on the command line) at yours"
    )
    """What to do about a refused connection, said after each such error."""


class ServerError(GlideMQError):
    """The server answered a command with an error glidemq did not expect. `code` is the
    error's code, the first word of the server's reply (`WRONGTYPE`, `NOGROUP`, `ERR`, ...),
    None when there is none to tell."""

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class LibraryError(ServerError):
    """The glidemq function library could not be loaded or has the wrong version."""


class ForeignLibraryError(LibraryError):
    """The server's function library named `glidemq` belongs to another project (Node
    glide-mq ships one by that name): glidemq neither replaces it nor runs on it. `functions`
    and `version` (what its glidemq_version answered, None if nothing) say what was found."""

    def __init__(self, functions: Sequence[str], version: str | None) -> None:
        names = list(functions)
        shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
        found = f"version {version!r}" if version is not None else "no readable version"
        super().__init__(
            f"the server's function library 'glidemq' is not glidemq for Python ({found}; "
            f"functions: {shown or 'none'}): it is left as it is and not used; "
            "give glidemq a Valkey server of its own"
        )
        self.functions = names
        self.version = version


class JobNotFoundError(GlideMQError, LookupError):
    """No job with this id exists in the queue."""

    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found in queue {queue!r}")
        self.queue = queue
        self.job_id = job_id


class QueueNotFoundError(GlideMQError, LookupError):
    """No key of this queue exists under the prefix (admin reads of an unknown queue)."""

    def __init__(self, queue: str, prefix: str) -> None:
        super().__init__(f"no queue {queue!r} under prefix {prefix!r}")
        self.queue = queue
        self.prefix = prefix


class QueueClosedError(GlideMQError):
    """The Queue (or producer) was closed: a call made after `close()`, or an add that was
    accepted but not sent before close's time-out ran out. Nothing of it was written."""

    def __init__(self, queue: str, detail: str = "it was closed") -> None:
        super().__init__(f"queue {queue!r} is closed: {detail}")
        self.queue = queue


class JobStateError(GlideMQError):
    """The operation is not possible in the job's current state."""

    def __init__(self, job_id: str, operation: str, detail: str) -> None:
        super().__init__(f"cannot {operation} job {job_id!r}: {detail}")
        self.job_id = job_id
        self.operation = operation


class JobTimeoutError(GlideMQError, TimeoutError):
    """A job ran longer than its timeout, or a wait for a job ran out of time."""


class OperationTimeoutError(GlideMQError, TimeoutError):
    """A call of the sync API did not finish within its `timeout`; what it asked for may
    still happen (an add may land)."""


class DurabilityError(GlideMQError):
    """A write ran on the primary, but its durability (ConnectionOptions `durability`) was
    not confirmed: the write may or may not survive a failover. It is on the primary now,
    and can still reach a replica, or be lost with the primary.

    `job_ids` names the jobs the write concerned (when known), `what` the server call,
    `seen` what the confirmation reported, and `reply` the server's answer to the write
    itself (what the call would have returned). Retry with the same job ids (a custom
    `job_id` or deduplication) to be safe: see docs/DURABILITY.md.
    """

    def __init__(
        self, what: str, seen: str, job_ids: Sequence[str] = (), reply: object = None
    ) -> None:
        self.what = what
        self.seen = seen
        self.job_ids = list(job_ids)
        self.reply = reply
        super().__init__(self._text())

    def _jobs(self) -> str:
        if not self.job_ids:
            return ""
        shown = ", ".join(self.job_ids[:10]) + (" ..." if len(self.job_ids) > 10 else "")
        return f" for job(s) {shown}"

    def _text(self) -> str:
        return (
            f"{self.what}{self._jobs()} ran on the primary but was not confirmed "
            f"({self.seen}): the write may or may not survive a failover"
        )

    def naming(self, job_ids: Sequence[str]) -> DurabilityError:
        """The same error, naming `job_ids`."""
        return DurabilityError(self.what, self.seen, job_ids, self.reply)


class DurabilityTimeoutError(DurabilityError, TimeoutError):
    """The replicas (or the AOF) did not confirm a write within the durability timeout:
    the write ran on the primary and may or may not survive a failover (DurabilityError)."""

    def __init__(
        self,
        what: str,
        seen: str,
        timeout_ms: int,
        job_ids: Sequence[str] = (),
        reply: object = None,
    ) -> None:
        self.timeout_ms = timeout_ms
        super().__init__(what, seen, job_ids, reply)

    def _text(self) -> str:
        return (
            f"{self.what}{self._jobs()} ran on the primary but was not confirmed within "
            f"{self.timeout_ms} ms ({self.seen}): the write may or may not survive a failover"
        )

    def naming(self, job_ids: Sequence[str]) -> DurabilityTimeoutError:
        """The same error, naming `job_ids`."""
        return DurabilityTimeoutError(self.what, self.seen, self.timeout_ms, job_ids, self.reply)


class JobFailedError(GlideMQError):
    """The job a caller waited for failed for good (`Queue.add_and_wait`).

    `reason` is the job's failedReason, `stacktrace` the processor's traceback when known.
    """

    def __init__(
        self, queue: str, job_id: str, reason: str | None, stacktrace: str | None = None
    ) -> None:
        super().__init__(f"job {job_id!r} of queue {queue!r} failed: {reason}")
        self.queue = queue
        self.job_id = job_id
        self.reason = reason
        self.stacktrace = stacktrace


class QueueFullError(GlideMQError):
    """An add was refused because the queue holds its maximum of jobs not yet started
    (`Queue.set_max_waiting`), or the job's ordering / group key does
    (`Queue.set_max_waiting_per_key`). Nothing of a refused job was written.

    From `add_bulk`: `results` is the list `add_bulk` would have returned (None for items
    not added) and `refused` the indexes of the items refused by the limit.
    """

    def __init__(
        self,
        queue: str,
        results: Sequence[object] | None = None,
        refused: Sequence[int] | None = None,
    ) -> None:
        n = len(refused) if refused is not None else 1
        super().__init__(f"queue {queue!r} is full: {n} job(s) refused")
        self.queue = queue
        self.results = list(results) if results is not None else []
        self.refused = list(refused) if refused is not None else []


class GroupFullError(QueueFullError):
    """An add was refused because its group (or ordering key) holds its maximum of jobs not
    yet started: `Queue.set_max_group_size`, else `Queue.set_max_waiting_per_key`. Other
    groups still take jobs. `group` is the key."""

    def __init__(self, queue: str, group: str) -> None:
        super().__init__(queue)
        self.args = (f"group {group!r} of queue {queue!r} is full: 1 job(s) refused",)
        self.group = group


class UnrecoverableError(GlideMQError):
    """Raised by a processor: fail the job now, without using its remaining attempts."""


class Retry(GlideMQError):
    """Raised by a processor: run the job again after `delay` ms (its backoff when None).

    The try counts as a failed attempt, so the job is retried while attempts remain and fails
    with this error's reason when none is left (as Celery's `self.retry(countdown=...)`)."""

    def __init__(self, delay: int | None = None, reason: str = "retry requested") -> None:
        if delay is not None and (
            isinstance(delay, bool) or not isinstance(delay, int) or delay < 0
        ):
            raise ValidationError("delay", "must be an integer >= 0 (ms) or None")
        super().__init__(reason)
        self.delay = delay
        """Milliseconds until the next try; None: the job's backoff decides."""


class TaskArgumentError(ValidationError, UnrecoverableError):
    """A task's arguments do not fit its signature or type hints; `field` names the argument
    (`send.to`). Raised on add; before a run, it fails the job at once (no retry could help)."""


class DelayedError(GlideMQError):
    """Raised after `Job.move_to_delayed`: the job went back to delayed, not failed."""


class SuspendedError(DelayedError):
    """Raised after `Job.suspend`: the job waits for a signal, it has not failed."""


class BatchError(GlideMQError):
    """Raised by a batch processor: some jobs failed, the others succeeded.

    `results` holds one entry per job: the job's result, or the exception it failed with.
    """

    def __init__(self, results: Sequence[object], message: str = "some jobs in the batch failed"):
        super().__init__(message)
        self.results = list(results)


class WaitingChildrenError(DelayedError):
    """Raised after `Job.move_to_waiting_children`: the job waits for its children, not failed."""


class CycleError(ValidationError):
    """Jobs of a flow or DAG depend on each other in a circle; `cycle` lists them in order
    (the first one again at the end). Raised before anything is written."""

    def __init__(self, cycle: Sequence[str]) -> None:
        super().__init__("flow", "dependency cycle: " + " -> ".join(cycle))
        self.cycle = list(cycle)


class CrossSlotError(GlideMQError):
    """A flow in a cluster uses queues whose keys hash to different slots; one atomic call
    cannot reach them. `slots` maps each queue to its slot. Raised before anything is written.
    The message names the two ways out (docs/WORKFLOWS.md, "Clusters: one slot per flow")."""

    def __init__(self, slots: dict[str, int]) -> None:
        listed = ", ".join(f"{q!r}: {s}" for q, s in sorted(slots.items(), key=lambda x: x[1]))
        super().__init__(
            "a flow's queues must share one cluster slot, these do not: "
            f"{listed}. Either pick queue names with the same slot (glidemq.keys.queue_slot), "
            "or keep the flow in the parent's slot and relay the remote work: a child in the "
            "parent's queue whose processor calls Queue.add_and_wait on the other queue "
            "(docs/WORKFLOWS.md, 'Clusters: one slot per flow')"
        )
        self.slots = dict(slots)


class SerializerMismatchError(GlideMQError):
    """A Queue or Worker uses another serializer than the one recorded for its queue (in the
    queue's meta hash by the first non-JSON Queue or Worker). `recorded` and `wanted` name
    them; nothing was added or run."""

    def __init__(self, queue: str, recorded: str, wanted: str, who: str) -> None:
        super().__init__(
            f"queue {queue!r} uses the {recorded!r} serializer, this {who} was given "
            f"serializer={wanted!r}: give it serializer={recorded!r}, or obliterate the queue "
            "to start over with another serializer"
        )
        self.queue = queue
        self.recorded = recorded
        self.wanted = wanted


class DuplicateJobError(GlideMQError):
    """A flow names a custom job id that already exists; nothing of the flow was written."""

    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} exists in queue {queue!r}; the flow was not added")
        self.queue = queue
        self.job_id = job_id


class JobIdsExhaustedError(GlideMQError):
    """An add found 10,000 generated ids in a row already taken by custom numeric ids; the
    queue's id counter moved past them, so adding again goes on from there."""

    def __init__(self, queue: str) -> None:
        super().__init__(
            f"queue {queue!r}: 10000 generated job ids in a row are taken by custom ids; "
            "add again (the counter moved past them), or use non-numeric custom ids"
        )
        self.queue = queue


# -- durable workflows (glidemq.durable) ------------------------------------------------------


class NonDeterminismError(UnrecoverableError):
    """A workflow's rerun reached, at `position` of its history, another step than the one
    recorded there (its code changed, or it branched on something not recorded). The run
    stops before it could mix results, and the workflow fails for good. `recorded` and
    `reached` describe both steps (`step 'charge'`, `sleep`)."""

    def __init__(self, workflow_id: str, position: int, recorded: str, reached: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is not deterministic: position {position} of its "
            f"history holds {recorded}, the rerun reached {reached}"
        )
        self.workflow_id = workflow_id
        self.position = position
        self.recorded = recorded
        self.reached = reached


class StepFailedError(UnrecoverableError):
    """A workflow's step failed for good: its attempts ran out, it raised
    UnrecoverableError, or its child job failed. Raised in the workflow at the step, where it
    can be caught (to compensate); uncaught, it fails the workflow for good with the step's
    name in the reason (the history keeps the failure, so a rerun would fail the same way).
    `step` is the step's name, `reason` its last error, `attempts` how many it made."""

    def __init__(self, step: str, reason: str, attempts: int) -> None:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"step {step!r} failed{tries}: {reason}")
        self.step = step
        self.reason = reason
        self.attempts = attempts


class EventTimeoutError(JobTimeoutError):
    """`WorkflowContext.wait_for_event` waited `timeout` seconds and no event `event` came.
    Raised in the workflow, where it can be caught; every replay raises it again."""

    def __init__(self, event: str, timeout: float | None) -> None:
        super().__init__(f"no event {event!r} came within {timeout} s")
        self.event = event
        self.timeout = timeout


class HistoryLimitError(UnrecoverableError):
    """A workflow's history would pass one of its caps: a step result over 1 MiB of JSON,
    more than 1,000 entries, or more than 8 MiB of entries in all (`limit` names the cap,
    `size` what was asked). The step is not recorded and the workflow fails for good."""

    def __init__(self, workflow_id: str, limit: str, size: int | None = None) -> None:
        what = f" ({size})" if size is not None else ""
        super().__init__(f"workflow {workflow_id!r}: its history is capped at {limit}{what}")
        self.workflow_id = workflow_id
        self.limit = limit
        self.size = size
