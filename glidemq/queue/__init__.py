"""The producer side of a queue: `Queue` (adding, waiting for results, backpressure) and the
parts it is made of: reads and maintenance (`admin`), queue-wide limits, request/response,
groups, queries, the backlog autoscalers read, job schedulers, suspend and signal, usage
summaries."""

from __future__ import annotations

from .backlog import Backlog
from .groups import GroupInfo
from .queries import Metrics, WorkerInfo
from .queue import JobCounts, Queue
from .schedulers import JobScheduler, JobTemplate
from .suspend import Signal

__all__ = [
    "Backlog",
    "GroupInfo",
    "JobCounts",
    "JobScheduler",
    "JobTemplate",
    "Metrics",
    "Queue",
    "Signal",
    "WorkerInfo",
]
