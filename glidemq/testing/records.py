"""What an in-memory queue stores: job records and sorted sets, as the server keeps them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..suspend import Signal
from ..usage import Usage

__all__ = ["FINISHED", "SHIFT", "Event", "JobRecord", "Owner", "ZSet"]

SHIFT = 2**42  # priority band width of the scheduled set, as on the server
FINISHED = ("completed", "failed")

Event = tuple[str, str, str | None, dict[str, str]]
"""An event as the events stream holds it: (entry id, event name, job id, other fields)."""


class Owner(Protocol):
    """A worker running jobs of this store."""

    started_at: int

    @property
    def opts(self) -> Any: ...

    @property
    def consumer(self) -> str: ...

    def is_running(self) -> bool: ...

    def is_paused(self) -> bool: ...

    def abort_job(self, job_id: str) -> bool: ...


@dataclass(slots=True, eq=False)
class JobRecord:
    """A job as stored: the fields of the job hash plus its log."""

    id: str
    name: str
    data: bytes
    opts: dict[str, Any]
    timestamp: int
    max_attempts: int
    delay: int
    priority: int
    state: str
    attempts_made: int = 0
    processed_on: int | None = None
    finished_on: int | None = None
    returnvalue: bytes | None = None
    failed_reason: str | None = None
    stacktrace: str | None = None
    progress: bytes | None = None
    parent_id: str | None = None
    expire_at: int | None = None
    revoked: bool = False
    stalled_count: int = 0
    dead_letter: bool = False
    step: str | None = None
    sid: str | None = None
    owner: Owner | None = None
    logs: list[str] = field(default_factory=list)
    # groups and ordering keys (glidemq/testing/groups.py)
    group_key: str | None = None
    ordering_seq: int = 0  # > 0: the job of an ordering key (a group of concurrency 1)
    group_slot: bool = False  # holds (or has reserved) a slot of its concurrency group
    cost: int = 0  # millitokens; 0: the default of 1 token
    lifo: bool = False
    # flows (glidemq/testing/flows.py): parents as (queue, id), pending children as
    # (queue, id), values and ignored failures of finished children by "queue:id"
    parents: list[tuple[str, str]] = field(default_factory=list)
    deps: set[tuple[str, str]] = field(default_factory=set)
    children_values: dict[str, bytes] = field(default_factory=dict)
    ignored_failures: dict[str, str] = field(default_factory=dict)
    child_failed: str | None = None
    failed_by: str | None = None  # "queue:id" of the child that failed this job
    usage: Usage | None = None  # summed model usage (glidemq/usage.py)
    signals: list[Signal] = field(default_factory=list)  # glidemq/suspend.py
    suspend_reason: str = ""
    budget: Any = None  # the flow's MemoryBudget (glidemq/testing/budgets.py)

    @property
    def ordering(self) -> bool:
        """Whether the job belongs to an ordering key (strict order, one at a time)."""
        return self.ordering_seq > 0


class ZSet:
    """A sorted set: members ordered by score, ties in the order they were (re)added.

    The server's scheduled set breaks ties the same way (a per-queue sequence folded into the
    score keeps jobs of one priority first-in first-out)."""

    def __init__(self) -> None:
        self.scores: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.scores)

    def __contains__(self, member: str) -> bool:
        return member in self.scores

    def add(self, member: str, score: int) -> None:
        self.scores.pop(member, None)  # re-added: behind the members already there
        self.scores[member] = score

    def remove(self, member: str) -> bool:
        return self.scores.pop(member, None) is not None

    def ordered(self) -> list[str]:
        return sorted(self.scores, key=self.scores.__getitem__)  # stable: ties keep add order

    def by_score(self, low: int, high: int) -> list[str]:
        return [m for m in self.ordered() if low <= self.scores[m] <= high]
