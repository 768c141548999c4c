"""Live updates: `GET /live` streams a JSON snapshot as a server-sent event whenever what the
open page shows changes (checked every `refresh` seconds): the counts, paused flag and
workers of the queues, the throughput chart, and, on a job's page, the job's changing
fields. The page's script patches the numbers in place and reloads only the part that
changed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..errors import GlideMQError
from ..keys import validate_job_id, validate_queue_name
from ..web.sse import Event, event_stream
from . import data
from .state import Dashboard, dashboard_of

__all__ = ["snapshot", "stream"]


async def snapshot(dash: Dashboard, queue: str | None, job_id: str | None) -> dict[str, Any]:
    """What the live feed sends for a page about `queue` (None: every queue) and `job_id`."""
    names = [queue] if queue else await dash.queue_names()
    summaries, chart = await asyncio.gather(data.overview(dash, names), data.chart(dash, names))
    out: dict[str, Any] = {
        "queues": {s.name: data.summary_json(s) for s in summaries},
        "chart": chart,
    }
    if queue and job_id:
        out["job"] = await data.job_snapshot(dash, queue, job_id)
    return out


async def _changes(dash: Dashboard, queue: str | None, job_id: str | None) -> AsyncIterator[Event]:
    last = b""
    while True:
        try:
            body = orjson.dumps(await snapshot(dash, queue, job_id))
        except GlideMQError as exc:
            yield Event("problem", orjson.dumps({"error": str(exc)}).decode())
        else:
            if body != last:
                last = body
                yield Event("snapshot", body.decode())
        await asyncio.sleep(dash.refresh)


async def stream(request: Request) -> Response:
    """GET /live?queue=Q&job=ID: the event stream for one page; 503 with Retry-After past
    the dashboard's `max_streams` (the page's script tries again)."""
    dash = dashboard_of(request)
    raw_queue = request.query_params.get("queue") or None
    raw_job = request.query_params.get("job") or None
    queue = validate_queue_name(raw_queue) if raw_queue else None
    job_id = validate_job_id(raw_job, "job") if raw_job and queue else None
    release = dash.streams.admit()  # StreamsFull: 503 with Retry-After
    return event_stream(_changes(dash, queue, job_id), on_close=release)
