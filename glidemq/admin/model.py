"""What the admin layer returns: plain, frozen dataclasses that any face can format or turn
into JSON (`to_jsonable`). Times are epoch milliseconds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..job.job import Job
from ..job.steps import Step
from ..options.limits import RateLimit
from ..queue.queries import Metrics, WorkerInfo
from ..queue.schedulers import JobScheduler
from .base import JobCounts

__all__ = [
    "ActionResult",
    "BulkResult",
    "FailedTry",
    "JobDetail",
    "JobPage",
    "JobRef",
    "JobRow",
    "QueueLimitsInfo",
    "QueueStatus",
    "QueueSummary",
    "to_jsonable",
]


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue in a listing: its counts, whether it is paused, how many workers serve it."""

    name: str
    counts: JobCounts
    paused: bool
    workers: int


@dataclass(frozen=True, slots=True)
class QueueLimitsInfo:
    """Queue-wide limits: rate limit, global concurrency (0: none), most jobs not yet started
    (`Queue.set_max_waiting`; None: none)."""

    rate_limit: RateLimit | None
    global_concurrency: int
    max_waiting: int | None


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """Everything about one queue at `now`: counts, workers and their heartbeats, jobs
    completed and failed per minute over the last hour, limits, schedulers, dead letters."""

    name: str
    now: int
    counts: JobCounts
    paused: bool
    workers: list[WorkerInfo]
    completed: Metrics
    failed: Metrics
    limits: QueueLimitsInfo
    schedulers: list[JobScheduler]
    dead_letter: int


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as one line of a listing."""

    id: str
    name: str
    state: str
    attempts_made: int
    max_attempts: int
    timestamp: int
    processed_on: int | None
    finished_on: int | None
    failed_reason: str | None
    progress: Any
    priority: int
    delay: int
    parent_id: str | None
    decode_error: str | None = None
    """Why the stored data or options could not be decoded (None: they could)."""

    @classmethod
    def of(cls, job: Job[Any, Any]) -> JobRow:
        """The row of a job read from the server."""
        return cls(
            id=job.id,
            name=job.name,
            state=job.state,
            attempts_made=job.attempts_made,
            max_attempts=job.max_attempts,
            timestamp=job.timestamp,
            processed_on=job.processed_on,
            finished_on=job.finished_on,
            failed_reason=job.failed_reason,
            progress=job.progress,
            priority=job.priority,
            delay=job.delay,
            parent_id=job.parent_id,
            decode_error=job.decode_error,
        )


@dataclass(frozen=True, slots=True)
class JobPage:
    """Jobs `offset .. offset + len(jobs) - 1` of a listing of `states` (in that order) or
    of a search; `total`: jobs in those states (None for a search); `more`: a next page
    exists."""

    queue: str
    states: tuple[str, ...]
    search: str | None
    offset: int
    limit: int
    total: int | None
    more: bool
    jobs: list[JobRow]


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job named across queues."""

    queue: str
    id: str


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job with everything stored about it: decoded data and result, logs, flow parents
    and children, and every raw field of its hash (`fields`; compressed data shown by size).
    """

    queue: str
    id: str
    name: str
    state: str
    dead_letter: bool
    data: Any
    opts: dict[str, Any]
    timestamp: int
    processed_on: int | None
    finished_on: int | None
    attempts_made: int
    max_attempts: int
    delay: int
    priority: int
    progress: Any
    returnvalue: Any
    failed_reason: str | None
    stacktrace: str | None
    revoked: bool
    stalled_count: int
    group_key: str | None
    step: str | None
    parents: list[JobRef]
    children_pending: list[JobRef]
    children_values: dict[str, Any]
    children_failures: dict[str, str]
    logs: list[str]
    log_count: int
    fields: dict[str, str] = field(default_factory=dict)
    tries: list[FailedTry] = field(default_factory=list)
    """The last failed tries (up to 5, oldest first), each with its own log lines."""
    decode_error: str | None = None
    """Why the stored data or options could not be decoded: then `data` is the stored text
    (a string) and `opts` is {}. None for a well-formed job."""
    steps: list[Step] = field(default_factory=list)
    """A durable workflow's history (name, kind, status, result or error, times, attempts),
    oldest first; [] for other jobs."""


@dataclass(frozen=True, slots=True)
class FailedTry:
    """One failed try of a job: its number, when it ended (epoch ms), why, its traceback
    (the first 2000 characters), and the log lines written during it (of those read;
    `logs_complete` False when some fell outside them)."""

    attempt: int
    at: int
    reason: str
    stack: str
    logs: list[str]
    logs_complete: bool


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What an action did to one job: `ok`, or why not in `detail`."""

    queue: str
    action: str
    id: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a queue-wide action did: how many jobs it touched (and their ids when known)."""

    queue: str
    action: str
    count: int
    ids: list[str] = field(default_factory=list)


def to_jsonable(value: Any) -> Any:
    """`value` as JSON-ready builtins: dataclasses as dicts (recursively), tuples as lists,
    anything else unknown as its `str`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
