"""The dashboard's pages: overview, one queue, one job, workers. Each reads through the
admin layer and renders a template; `?fragment=…` renders only the part that live updates
replace."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..admin import format as admin_format
from ..admin.actions import EDITABLE_STATES
from ..admin.base import JOB_STATES
from ..admin.model import QueueSummary
from ..errors import JobNotFoundError, ValidationError
from ..keys import validate_job_id, validate_queue_name
from ..queue.queries import state_name
from ..queue.schedulers import options_of_wire
from . import data
from .state import dashboard_of
from .timeline import rows_of

__all__ = ["job", "overview", "queue", "workers"]

PAGE_SIZES = (10, 25, 50, 100, 200)
GROUPS_SHOWN = 50  # groups on a queue's page (a queue may have many thousands)
DEFAULT_SIZE = 25
JOB_EVENTS = 500  # recent queue events searched for a job's timeline
FLOW_LEVELS = 20  # parents followed up to the root of a job's flow
FLOW_NODES = 200  # jobs of a flow shown on a job's page


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(name, "must be a whole number") from None
    if not low <= value <= high:
        raise ValidationError(name, f"must be from {low} to {high}")
    return value


def _queue_param(request: Request, name: str = "name") -> str:
    return validate_queue_name(request.query_params.get(name, ""))


async def overview(request: Request) -> Response:
    """Every queue under the prefix: counts per state, paused, workers, and the chart."""
    dash = dashboard_of(request)
    names = await dash.queue_names()
    summaries, chart = await asyncio.gather(data.overview(dash, names), data.chart(dash, names))
    rows = [(s, data.state_sizes(s)) for s in summaries]
    return dash.render(
        request, "overview.html", rows=rows, chart=chart, states=JOB_STATES, live_queue=""
    )


async def _add_form(dash: Any, queue: str, source: str | None) -> dict[str, Any]:
    """The "Add a job" form: empty, or filled from job `source` (Duplicate)."""
    form = {"open": False, "name": "", "data": "{}", "opts": "{}", "source": ""}
    if source:
        view = await dash.admin.view(queue)
        job = await view.get_job(validate_job_id(source, "from"))
        if job is None:
            raise JobNotFoundError(queue, source)
        form.update(
            open=True,
            name=job.name,
            data=orjson.dumps(job.data, option=orjson.OPT_INDENT_2, default=str).decode(),
            opts=orjson.dumps(options_of_wire(job.opts), option=orjson.OPT_INDENT_2).decode(),
            source=job.id,
        )
    return form


async def queue(request: Request) -> Response:
    """One queue: status, limits, schedulers, and a page of its jobs in one state (or the
    jobs a search found)."""
    dash = dashboard_of(request)
    name = _queue_param(request)
    state = state_name(request.query_params.get("state") or "waiting")
    if state not in JOB_STATES:
        raise ValidationError("state", f"unknown state {state!r}")
    size = _int(request, "size", DEFAULT_SIZE, 1, max(PAGE_SIZES))
    number = _int(request, "page", 1, 1, 1_000_000)
    text = request.query_params.get("q", "").strip()
    status = await dash.admin.status(name)
    offset = (number - 1) * size
    if text:
        page = await dash.admin.find(name, text, limit=size, offset=offset)
    else:
        page = await dash.admin.jobs(name, [state], limit=size, offset=offset)
    summary = QueueSummary(name, status.counts, status.paused, len(status.workers))
    context: dict[str, Any] = dict(
        status=status,
        sizes=data.state_sizes(summary),
        states=JOB_STATES,
        state=state,
        page=page,
        number=number,
        size=size,
        sizes_allowed=PAGE_SIZES,
        q=text,
        chart=data.chart_of(status.completed, status.failed),
        live_queue=name,
        now=status.now,
        add_form=await _add_form(dash, name, request.query_params.get("from")),
        groups=await dash.admin.groups(name, limit=GROUPS_SHOWN),
        groups_shown=GROUPS_SHOWN,
        group_limits=admin_format.group_limits,
    )
    if request.query_params.get("fragment") == "jobs":
        return dash.render(request, "_jobs.html", **context)
    return dash.render(request, "queue.html", **context)


async def _flow_root(dash: Any, queue: str, job_id: str, parents: Sequence[Any]) -> tuple[str, str]:
    """The topmost job above this one (following each job's first parent, a bounded
    number of levels): where the page's flow tree starts."""
    here = (queue, job_id)
    for _ in range(FLOW_LEVELS):
        if not parents:
            break
        here = (parents[0].queue, parents[0].id)
        view = await dash.admin.view(here[0], must_exist=False)
        job = await view.get_job(here[1])
        if job is None:
            break
        parents = [_Ref(q, i) for q, i in await job.get_parents()]
    return here


@dataclass(frozen=True, slots=True)
class _Ref:
    queue: str
    id: str


async def job(request: Request) -> Response:
    """One job in full: data, options, progress, logs, stacktrace, result, attempts and
    timeline, flow links, and its actions."""
    dash = dashboard_of(request)
    name = _queue_param(request, "queue")
    job_id = validate_job_id(request.query_params.get("id", ""), "id")
    detail, events = await asyncio.gather(
        dash.admin.job(name, job_id, log_lines=200), dash.admin.events(name, JOB_EVENTS)
    )
    mine = [e for e in events if e.job_id == job_id]
    children_done = [
        (ref.partition(":")[0], ref.partition(":")[2], value)
        for ref, value in detail.children_values.items()
    ]
    children_failed = [
        (ref.partition(":")[0], ref.partition(":")[2], reason)
        for ref, reason in detail.children_failures.items()
    ]
    flow = None
    if detail.parents or detail.children_pending or children_done or children_failed:
        root_queue, root_id = await _flow_root(dash, name, job_id, detail.parents)
        view = await dash.admin.view(root_queue, must_exist=False)
        flow = await view.get_flow(root_id, max_nodes=FLOW_NODES)
    context: dict[str, Any] = dict(
        job=detail,
        editable=detail.state in EDITABLE_STATES,  # the server decides; this hides the editor
        flow=flow,
        events=rows_of(mine),
        children_done=children_done,
        children_failed=children_failed,
        live_queue=name,
        live_job=job_id,
    )
    if request.query_params.get("fragment") == "detail":
        return dash.render(request, "_job_detail.html", **context)
    return dash.render(request, "job.html", **context)


async def workers(request: Request) -> Response:
    """Every live worker of every queue: queue, host, pid, concurrency, heartbeat."""
    dash = dashboard_of(request)
    names = await dash.queue_names()
    found = await data.workers(dash, names)
    return dash.render(request, "workers.html", workers=found, live_queue="")
