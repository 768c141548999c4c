"""The admin layer's reads: which queues exist, one queue's status, pages of jobs, one job in
full, schedulers and recent events. Each returns the dataclasses of `glidemq.admin.model`
and reads through `QueueView` (the `Queue` code), never through key names of its own, except
the two reads no `Queue` method offers: the queue scan and a parent's pending children."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from glide import ClusterScanCursor, GlideClusterClient, MaxId, MinId

from ..client.connection import Client
from ..client.context import now_ms
from ..errors import ValidationError
from ..events import QueueEvent, parse_event
from ..job.children import children_failures, children_values
from ..job.flowview import parse_ref
from ..job.job import Job
from ..keys import validate_queue_name
from ..queue.queries import SEARCH_STATES, state_name
from ..queue.schedulers import JobScheduler
from .base import JOB_STATES, JobCounts
from .model import (
    FailedTry,
    JobDetail,
    JobPage,
    JobRef,
    JobRow,
    QueueLimitsInfo,
    QueueStatus,
    QueueSummary,
)
from .view import QueueView

__all__ = [
    "MAX_LOG_LINES",
    "job_detail",
    "job_page",
    "queue_names",
    "queue_status",
    "queue_summary",
    "recent_events",
    "schedulers",
    "state_sizes",
]

MAX_LOG_LINES = 10_000
"""Most log lines one job detail reads (a job's log may be far longer)."""
_SCAN_COUNT = 1000
# Key kinds every queue that holds anything has at least one of (id, meta, stream,
# scheduled, schedulers, metrics, completed, failed); no per-job key starts with c/f/i/m/s.
_QUEUE_KEYS = "[cfims]*"
_GLOB = set("*?[")
_BIG_FIELDS = (b"data", b"returnvalue")


async def queue_names(client: Client, prefix: str) -> list[str]:
    """Names of the queues under `prefix` that hold any key, sorted. One SCAN over the
    keyspace (every primary of a cluster), matching only queue-level keys."""
    match = f"{prefix}:{{*}}:{_QUEUE_KEYS}"
    head = f"{prefix}:{{".encode()
    found: set[str] = set()

    def take(keys: Sequence[bytes]) -> None:
        for key in keys:
            name = key[len(head) :].partition(b"}:")[0].decode(errors="replace")
            try:
                found.add(validate_queue_name(name))
            except ValidationError:
                continue  # a key that only looks like one of ours

    if isinstance(client, GlideClusterClient):
        cursor = ClusterScanCursor()  # type: ignore[no-untyped-call,unused-ignore]
        while not cursor.is_finished():
            cursor, keys = await client.scan(cursor, match=match, count=_SCAN_COUNT)  # type: ignore[assignment,misc,unused-ignore]
            take(keys)  # type: ignore[arg-type,unused-ignore]
    else:
        position: bytes = b"0"
        while True:
            position, keys = await client.scan(position, match=match, count=_SCAN_COUNT)  # type: ignore[assignment,misc,unused-ignore]
            take(keys)  # type: ignore[arg-type,unused-ignore]
            if position == b"0":
                break
    return sorted(found)


async def queue_summary(view: QueueView) -> QueueSummary:
    """Counts, paused and the number of live workers of one queue."""
    counts, workers = await asyncio.gather(view.get_job_counts(), view.get_workers())
    return QueueSummary(view.name, counts, counts.paused, len(workers))


async def queue_status(view: QueueView) -> QueueStatus:
    """Everything about one queue now (docs/ADMIN.md, `glidemq status`)."""
    counts, workers, completed, failed = await asyncio.gather(
        view.get_job_counts(),
        view.get_workers(),
        view.get_metrics("completed", minutes=60),
        view.get_metrics("failed", minutes=60),
    )
    rate, concurrency, max_waiting, found = await asyncio.gather(
        view.get_global_rate_limit(),
        view.get_global_concurrency(),
        view.get_max_waiting(),
        view.get_job_schedulers(),
    )
    return QueueStatus(
        name=view.name,
        now=now_ms(),
        counts=counts,
        paused=counts.paused,
        workers=workers,
        completed=completed,
        failed=failed,
        limits=QueueLimitsInfo(rate, concurrency, max_waiting),
        schedulers=found,
        dead_letter=counts.dead_letter,
    )


def state_sizes(c: JobCounts) -> dict[str, int]:
    """How many jobs `get_jobs` lists for each state (JobCounts folds some into others)."""
    return {
        "waiting": c.waiting - c.group_waiting,
        "active": c.active,
        "delayed": c.delayed - c.rate_limited,
        "prioritized": c.prioritized,
        "completed": c.completed,
        "failed": c.failed,
        "dead_letter": c.dead_letter,
        "waiting-children": c.waiting_children,
        "group-waiting": c.group_waiting,
        "rate-limited": c.rate_limited,
    }


def search_pattern(text: str) -> str:
    """The name glob a `--search` text stands for: a glob as it is, plain text as a
    substring (`*text*`)."""
    return text if _GLOB & set(text) else f"*{text}*"


def _check_page(states: Sequence[str], limit: int, offset: int) -> None:
    for state in states:
        if state not in JOB_STATES:
            raise ValidationError(
                "state", f"unknown state {state!r}; one of {', '.join(JOB_STATES)}"
            )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ValidationError("limit", "must be an integer from 1 to 10000")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError("offset", "must be an integer >= 0")


async def job_page(
    view: QueueView,
    states: Sequence[str] = (),
    *,
    limit: int = 20,
    offset: int = 0,
    search: str | None = None,
) -> JobPage:
    """Jobs `offset ..` of the listing of `states` (default: every state, in the order of
    `JOB_STATES`), at most `limit`; with `search`, only jobs whose name matches it (a glob,
    or a substring) among the searchable states."""
    chosen = tuple(dict.fromkeys(state_name(s) for s in states)) or (
        SEARCH_STATES if search else JOB_STATES
    )
    _check_page(chosen, limit, offset)
    if search is not None:
        for state in chosen:
            if state not in SEARCH_STATES:
                raise ValidationError(
                    "state", f"cannot search {state!r} jobs; one of {', '.join(SEARCH_STATES)}"
                )
        found = await view.search_jobs(
            search_pattern(search), state=list(chosen), limit=offset + limit + 1
        )
        rows = [JobRow.of(j) for j in found[offset : offset + limit]]
        return JobPage(
            view.name, chosen, search, offset, limit, None, len(found) > offset + limit, rows
        )
    sizes = state_sizes(await view.get_job_counts())
    total = sum(sizes[s] for s in chosen)
    jobs: list[Job[Any, Any]] = []
    skip = offset
    for state in chosen:
        need = limit - len(jobs)
        if need <= 0:
            break
        if skip >= sizes[state]:
            skip -= sizes[state]
            continue
        jobs += await view.get_jobs(state, skip, skip + need - 1)
        skip = 0
    rows = [JobRow.of(j) for j in jobs]
    return JobPage(view.name, chosen, None, offset, limit, total, offset + len(rows) < total, rows)


def _refs(texts: Sequence[str]) -> list[JobRef]:
    out = []
    for text in texts:
        parsed = parse_ref(text)
        if parsed is not None:
            out.append(JobRef(*parsed))
    return out


def _raw_fields(fields: dict[bytes, bytes]) -> dict[str, str]:
    out = {}
    for key, value in fields.items():
        if key in _BIG_FIELDS and value.startswith(b"gz:"):
            out[key.decode()] = f"<{len(value)} bytes, compressed>"
        else:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


async def job_detail(view: QueueView, job_id: str, *, log_lines: int = 100) -> JobDetail | None:
    """Everything about one job (None if it does not exist); the last `log_lines` lines of
    its log."""
    if (
        isinstance(log_lines, bool)
        or not isinstance(log_lines, int)
        or not 0 <= log_lines <= MAX_LOG_LINES
    ):
        raise ValidationError("log_lines", f"must be an integer from 0 to {MAX_LOG_LINES}")
    ctx = view.ctx
    fields = await ctx.get_fields(job_id)
    if fields is None:
        return None
    job: Job[Any, Any] = Job(ctx, fields)
    deps_key = view.keys.base + "deps:" + job_id
    pending, values, failures, (logs, log_count) = await asyncio.gather(
        ctx.command(lambda c: c.smembers(deps_key)),
        children_values(ctx, job_id),
        children_failures(ctx, job_id),
        view.get_job_logs(job_id, -log_lines, -1) if log_lines else _no_logs(view, job_id),
    )
    parents = []
    if job.parent_id:
        # 'glide:{reports}', or a bare queue name as glide-mq writes it
        text = fields.get(b"parentQueue", b"").decode() or view.name
        queue = text[text.find("{") + 1 : text.rfind("}")] if "{" in text else text
        parents.append(JobRef(queue, job.parent_id))
    extra = fields.get(b"extraParents", b"").decode()
    parents += _refs(extra.split("\n") if extra else [])
    return JobDetail(
        queue=view.name,
        id=job.id,
        name=job.name,
        state=job.state,
        dead_letter=fields.get(b"deadLetter") == b"1",
        data=job.data,
        opts=job.opts,
        timestamp=job.timestamp,
        processed_on=job.processed_on,
        finished_on=job.finished_on,
        attempts_made=job.attempts_made,
        max_attempts=job.max_attempts,
        delay=job.delay,
        priority=job.priority,
        progress=job.progress,
        returnvalue=job.returnvalue,
        failed_reason=job.failed_reason,
        stacktrace=job.stacktrace,
        revoked=job.revoked,
        stalled_count=job.stalled_count,
        group_key=job.group_key,
        step=job.step,
        parents=parents,
        children_pending=sorted(_refs([m.decode() for m in pending or ()]), key=_ref_order),
        children_values=values,
        children_failures=failures,
        logs=logs,
        log_count=log_count,
        tries=tries_of(job.failures, logs, log_count),
        fields=_raw_fields(fields),
        decode_error=job.decode_error,
        steps=job.steps,
    )


def tries_of(failures: list[dict[str, Any]], logs: list[str], log_count: int) -> list[FailedTry]:
    """The job's failed tries with the log lines of each: the lines written after the try
    before it ended and up to its end (`logs` are the last lines of `log_count`)."""
    first = log_count - len(logs)  # the index of logs[0] in the whole log
    out, start = [], 0
    for f in failures:
        try:
            end = int(f.get("logs", 0))
            attempt, at = int(f.get("attempt", 0)), int(f.get("at", 0))
        except (TypeError, ValueError):
            continue
        lo, hi = max(start, first), min(end, log_count)
        lines = logs[lo - first : hi - first] if hi > lo else []
        out.append(
            FailedTry(
                attempt,
                at,
                str(f.get("reason", "")),
                str(f.get("stack", "")),
                lines,
                start >= first,
            )
        )
        start = end
    return out


def _ref_order(ref: JobRef) -> tuple[str, int, str]:
    return (ref.queue, int(ref.id) if ref.id.isdigit() else 0, ref.id)


async def _no_logs(view: QueueView, job_id: str) -> tuple[list[str], int]:
    _, total = await view.get_job_logs(job_id, 0, 0)
    return [], total


async def schedulers(view: QueueView) -> list[JobScheduler]:
    """Every scheduler of the queue, the next to run first."""
    return await view.get_job_schedulers()


async def recent_events(view: QueueView, count: int = 20) -> list[QueueEvent]:
    """The queue's last `count` events, oldest first."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10_000:
        raise ValidationError("count", "must be an integer from 1 to 10000")
    key = view.keys.events
    reply = await view.ctx.command(lambda c: c.xrevrange(key, MaxId(), MinId(), count))
    events = [parse_event(entry_id, pairs) for entry_id, pairs in (reply or {}).items()]
    return events[::-1]
