"""Text for people: the `glidemq` command's tables and detail views of the admin model.
(`--json` output is `model.to_jsonable` instead.)"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from ..events import QueueEvent
from ..job.steps import Step
from ..queue.groups import GroupInfo
from ..queue.queries import Metrics
from ..queue.schedulers import JobScheduler
from .model import ActionResult, BulkResult, JobDetail, JobPage, QueueStatus, QueueSummary

__all__ = [
    "action_results",
    "bulk_result",
    "event_line",
    "job_detail",
    "job_page",
    "queue_status",
    "queues",
    "schedulers",
    "table",
]

_QUEUE_COLUMNS = [
    "QUEUE",
    "WAITING",
    "ACTIVE",
    "DELAYED",
    "PRIORITIZED",
    "WAITING-CHILDREN",
    "COMPLETED",
    "FAILED",
    "DLQ",
    "PAUSED",
    "WORKERS",
]
_CELL = 60  # widest cell of a table; longer text is cut with "..."


def _cut(text: str, width: int = _CELL) -> str:
    text = " ".join(text.split())  # one line per row
    return text if len(text) <= width else text[: width - 3] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows under headers, columns aligned (numbers to the right)."""
    cells = [[_cut("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) for r in rows) for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def clock(ms: int | None) -> str:
    """A time as local `YYYY-MM-DD HH:MM:SS`, or '-'."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def ago(ms: int | None, now: int) -> str:
    """How long before `now` a time was: '4s ago', '3m ago', 'in 2h' for the future."""
    if not ms:
        return "-"
    delta = (now - ms) / 1000
    span = abs(delta)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if span >= size:
            text = f"{int(span // size)}{unit}"
            break
    else:
        text = f"{int(span * 1000)}ms"
    return f"{text} ago" if delta >= 0 else f"in {text}"


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def queues(rows: Sequence[QueueSummary]) -> str:
    """`glidemq queues`."""
    if not rows:
        return "no queues"
    return table(
        _QUEUE_COLUMNS,
        [
            [
                q.name,
                q.counts.waiting,
                q.counts.active,
                q.counts.delayed,
                q.counts.prioritized,
                q.counts.waiting_children,
                q.counts.completed,
                q.counts.failed,
                q.counts.dead_letter,
                "yes" if q.paused else "no",
                q.workers,
            ]
            for q in rows
        ],
    )


def _per_minute(m: Metrics) -> str:
    last = m.counts
    return f"{sum(last[-1:])} this minute, {sum(last[-15:])} in 15 min, {sum(last)} in 60 min"


def queue_status(s: QueueStatus) -> str:
    """`glidemq status QUEUE`."""
    c = s.counts
    out = [f"queue {s.name}" + ("  (PAUSED)" if s.paused else "")]
    counts = c.as_dict()
    out.append(table(["STATE", "JOBS"], [[k, v] for k, v in counts.items()]))
    if c.group_waiting or c.rate_limited:
        out.append(
            f"  of which waiting for a group slot: {c.group_waiting}, "
            f"held by a group rate limit: {c.rate_limited}"
        )
    out.append("")
    out.append(f"completed: {_per_minute(s.completed)}")
    out.append(f"failed:    {_per_minute(s.failed)}")
    out.append(f"dead letters: {s.dead_letter}")
    limits = s.limits
    rate = limits.rate_limit
    out.append(
        "limits: rate "
        + (f"{rate.max} per {rate.duration} ms" if rate else "none")
        + ", global concurrency "
        + (str(limits.global_concurrency) if limits.global_concurrency else "none")
        + ", max waiting "
        + (str(limits.max_waiting) if limits.max_waiting is not None else "none")
    )
    out.append("")
    if s.workers:
        out.append(f"workers ({len(s.workers)}):")
        out.append(
            table(
                ["ID", "HOST", "PID", "CONCURRENCY", "STARTED", "LAST HEARTBEAT"],
                [
                    [
                        w.id,
                        w.host,
                        w.pid,
                        w.concurrency,
                        ago(w.started, s.now),
                        ago(w.last_heartbeat, s.now),
                    ]
                    for w in s.workers
                ],
            )
        )
    else:
        out.append("workers: none")
    out.append("")
    if s.schedulers:
        out.append(f"schedulers ({len(s.schedulers)}):")
        out.append(schedulers(s.schedulers, s.now))
    else:
        out.append("schedulers: none")
    return "\n".join(out)


def job_page(page: JobPage, now: int) -> str:
    """`glidemq jobs QUEUE`."""
    if not page.jobs:
        where = ", ".join(page.states)
        return f"no jobs ({where}" + (f", name matching {page.search!r})" if page.search else ")")
    body = table(
        ["ID", "NAME", "STATE", "FAILED TRIES", "ADDED", "FINISHED", "REASON"],
        [
            [
                j.id,
                j.name,
                j.state,
                f"{j.attempts_made}/{j.max_attempts}",
                ago(j.timestamp, now),
                ago(j.finished_on, now),
                j.failed_reason or "",
            ]
            for j in page.jobs
        ],
    )
    first, last = page.offset + 1, page.offset + len(page.jobs)
    of = f" of {page.total}" if page.total is not None else ""
    more = f"; next page: --offset {last}" if page.more else ""
    return f"{body}\n(jobs {first}-{last}{of}{more})"


def job_detail(d: JobDetail, now: int) -> str:
    """`glidemq job QUEUE ID`."""
    state = (
        d.state + (" (dead letter)" if d.dead_letter else "") + (" (revoked)" if d.revoked else "")
    )
    rows: list[tuple[str, object]] = [
        ("queue", d.queue),
        ("id", d.id),
        ("name", d.name),
        ("state", state),
        ("failed tries", f"{d.attempts_made} of {d.max_attempts} allowed"),
        ("added", f"{clock(d.timestamp)} ({ago(d.timestamp, now)})"),
        ("started", clock(d.processed_on)),
        ("finished", clock(d.finished_on)),
        ("progress", _json(d.progress)),
        ("priority", d.priority),
        ("delay", f"{d.delay} ms"),
        ("stalled", d.stalled_count),
        ("group", d.group_key or "-"),
        ("step", d.step or "-"),
        ("opts", _json(d.opts)),
        ("data", _json(d.data)),
        ("returnvalue", _json(d.returnvalue)),
        ("failed reason", d.failed_reason or "-"),
    ]
    if d.decode_error:
        rows.append(("decode error", f"stored data cannot be decoded: {d.decode_error}"))
    width = max(len(k) for k, _ in rows)
    out = [f"{k.ljust(width)}  {v}" for k, v in rows]
    if d.parents:
        out.append("parents: " + ", ".join(f"{p.queue}:{p.id}" for p in d.parents))
    if d.children_pending or d.children_values or d.children_failures:
        out.append("children:")
        out += [f"  {c.queue}:{c.id}  pending" for c in d.children_pending]
        out += [f"  {ref}  completed -> {_json(v)}" for ref, v in d.children_values.items()]
        out += [f"  {ref}  failed (ignored): {r}" for ref, r in d.children_failures.items()]
    if d.steps:
        out.append(f"steps ({len(d.steps)}):")
        out += [_step_line(s) for s in d.steps]
    if d.stacktrace:
        out.append("stacktrace:")
        out += ["  " + line for line in d.stacktrace.splitlines()]
    shown = len(d.logs)
    out.append(
        f"logs ({d.log_count} lines" + (f", last {shown} shown):" if shown < d.log_count else "):")
    )
    out += ["  " + line for line in d.logs]
    out.append("fields:")
    key_width = max((len(k) for k in d.fields), default=0)
    out += [f"  {k.ljust(key_width)}  {_cut(v, 200)}" for k, v in sorted(d.fields.items())]
    return "\n".join(out)


def _step_line(s: Step) -> str:
    """One entry of a workflow's history: position, kind and name, status, what came out."""
    what = s.name if s.kind == "step" else f"{s.kind} {s.name}" if s.name != s.kind else s.kind
    line = f"  {s.position:>3}  {_cut(what, 40):<40}  {s.status:<9}"
    if s.attempts > 1:
        line += f"  {s.attempts} attempts"
    if s.child:
        line += f"  child {s.child}"
    if s.status in ("sleeping", "waiting", "retrying") and s.until:
        line += f"  until {clock(s.until)}"
    elif s.finished_at:
        line += f"  {clock(s.finished_at)}"
    if s.error:
        line += f"  error: {_cut(s.error, 120)}"
    elif s.result is not None:
        line += f"  -> {_cut(_json(s.result), 120)}"
    return line


def schedulers(rows: Sequence[JobScheduler], now: int) -> str:
    """`glidemq schedulers QUEUE` (also part of `status`)."""
    if not rows:
        return "no schedulers"
    return table(
        ["NAME", "SCHEDULE", "NEXT RUN", "LAST RUN", "JOBS", "JOB NAME"],
        [
            [
                s.name,
                f"cron {s.cron}" + (f" ({s.tz})" if s.tz else "")
                if s.cron
                else f"every {s.every_ms} ms",
                f"{clock(s.next_run)} ({ago(s.next_run, now)})",
                ago(s.last_run, now),
                s.count if s.limit is None else f"{s.count}/{s.limit}",
                s.template.name or s.name,
            ]
            for s in rows
        ],
    )


def event_line(ev: QueueEvent) -> str:
    """One event as a line: time, event, job id, other fields."""
    ms = ev.id.partition("-")[0]
    when = clock(int(ms)) if ms.isdigit() else ev.id
    extra = " ".join(f"{k}={_cut(v)}" for k, v in ev.fields.items())
    return f"{when}  {ev.event:<12} {ev.job_id or '-':<10} {extra}".rstrip()


def action_results(results: Sequence[ActionResult]) -> str:
    """One line per job an action was asked to change."""
    done = {
        "retry": "retried",
        "remove": "removed",
        "promote": "promoted",
        "update-data": "updated",
    }
    lines = []
    for r in results:
        verb = done.get(r.action, r.action)
        if r.ok:
            lines.append(f"{verb} {r.id}" + (f" ({r.detail})" if r.detail else ""))
        else:
            lines.append(f"not {verb} {r.id}: {r.detail}")
    return "\n".join(lines)


def bulk_result(r: BulkResult) -> str:
    """What a queue-wide action did."""
    if r.action == "pause":
        return f"paused {r.queue}"
    if r.action == "resume":
        return f"resumed {r.queue}"
    if r.action == "obliterate":
        return f"obliterated {r.queue} ({r.count} jobs)"
    verb = {"retry": "retried", "clean": "removed", "drain": "removed"}.get(r.action, r.action)
    return f"{verb} {r.count} jobs of {r.queue}"


def group_limits(g: GroupInfo) -> str:
    """A group's limits in words: 'fair x2, 5 at once, 10/1000ms, max 500, paused'."""
    parts = []
    if g.weight is not None:
        parts.append(f"fair x{g.weight}")
    if g.ordering:
        parts.append("ordering key")
    elif g.concurrency is not None:
        parts.append(f"{g.concurrency} at once")
    if g.rate_limit is not None:
        parts.append(f"{g.rate_limit.max}/{g.rate_limit.duration}ms")
    if g.token_capacity is not None:
        parts.append(f"bucket {g.tokens:g}/{g.token_capacity:g}")
    if g.max_size is not None:
        parts.append(f"max {g.max_size}")
    return ", ".join(parts) or "-"


def groups(rows: Sequence[GroupInfo]) -> str:
    """`glidemq groups QUEUE`."""
    if not rows:
        return "no groups"
    return table(
        ["GROUP", "WAITING", "PARKED", "ACTIVE", "PAUSED", "LIMITS"],
        [
            [
                g.key,
                g.waiting,
                g.parked,
                "-" if g.active is None else g.active,
                "yes" if g.paused else "no",
                group_limits(g),
            ]
            for g in rows
        ],
    )
