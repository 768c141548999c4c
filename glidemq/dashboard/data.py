"""What the pages and the live feed show, gathered through the admin layer: the overview of
every queue, one queue's status, the throughput chart, and a job's changing fields. Costs
per call: one counts call and one workers read per queue, one metrics read per queue and
kind; never a walk over a queue's jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..admin import queries
from ..admin.base import JOB_STATES
from ..admin.model import QueueSummary
from ..client.context import now_ms
from ..queue.queries import Metrics, WorkerInfo

if TYPE_CHECKING:
    from .state import Dashboard

__all__ = ["CHART_MINUTES", "chart", "job_snapshot", "overview", "state_sizes", "workers"]

CHART_MINUTES = 60
_AT_ONCE = 16  # queues read concurrently


async def _each(names: Sequence[str], read: Any) -> list[Any]:
    gate = asyncio.Semaphore(_AT_ONCE)

    async def one(name: str) -> Any:
        async with gate:
            return await read(name)

    return list(await asyncio.gather(*(one(n) for n in names)))


async def overview(dash: Dashboard, names: Sequence[str]) -> list[QueueSummary]:
    """Counts, paused flag and live workers of each queue."""

    async def read(name: str) -> QueueSummary:
        return await queries.queue_summary(await dash.admin.view(name, must_exist=False))

    return await _each(names, read)


def state_sizes(summary: QueueSummary) -> dict[str, int]:
    """How many jobs each listing state of `JOB_STATES` holds."""
    sizes = queries.state_sizes(summary.counts)
    return {s: sizes[s] for s in JOB_STATES}


async def chart(dash: Dashboard, names: Sequence[str]) -> dict[str, Any]:
    """Jobs completed and failed per minute over the last hour, summed over `names`:
    `{"start": epoch ms of the first minute, "completed": [...], "failed": [...]}`."""

    async def read(name: str) -> tuple[Metrics, Metrics]:
        view = await dash.admin.view(name, must_exist=False)
        done, failed = await asyncio.gather(
            view.get_metrics("completed", minutes=CHART_MINUTES),
            view.get_metrics("failed", minutes=CHART_MINUTES),
        )
        return done, failed

    pairs = await _each(names, read)
    last = now_ms() // 60_000
    out: dict[str, Any] = {
        "start": (last - CHART_MINUTES + 1) * 60_000,
        "completed": [0] * CHART_MINUTES,
        "failed": [0] * CHART_MINUTES,
    }
    for pair in pairs:
        for m in pair:
            offset = (m.start - out["start"]) // 60_000
            series = out[m.kind]
            for i, count in enumerate(m.counts):
                if 0 <= i + offset < CHART_MINUTES:
                    series[i + offset] += count
    return out


def chart_of(completed: Metrics, failed: Metrics) -> dict[str, Any]:
    """The chart data of one queue's status."""
    return {
        "start": completed.start,
        "completed": list(completed.counts),
        "failed": list(failed.counts),
    }


async def workers(dash: Dashboard, names: Sequence[str]) -> list[tuple[str, WorkerInfo]]:
    """Every live worker of the queues, with its queue's name."""

    async def read(name: str) -> list[WorkerInfo]:
        view = await dash.admin.view(name, must_exist=False)
        return await view.get_workers()

    found = await _each(names, read)
    return [(name, w) for name, ws in zip(names, found, strict=True) for w in ws]


def summary_json(summary: QueueSummary) -> dict[str, Any]:
    """A queue summary as the live feed sends it."""
    return {
        "paused": summary.paused,
        "workers": summary.workers,
        "counts": state_sizes(summary),
    }


async def job_snapshot(dash: Dashboard, queue: str, job_id: str) -> dict[str, Any] | None:
    """The fields of a job that change while one looks at it (None once it is gone)."""
    view = await dash.admin.view(queue, must_exist=False)
    job = await view.get_job(job_id)
    if job is None:
        return None
    return {
        "state": job.state,
        "progress": job.progress,
        "attempts_made": job.attempts_made,
        "processed_on": job.processed_on,
        "finished_on": job.finished_on,
        "priority": job.priority,
    }
