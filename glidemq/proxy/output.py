"""A job's output stream (the chunks its processor sends with `Job.stream`): followed as
server-sent events until the job finished, each chunk's entry id as the event id so a
client resumes with `Last-Event-ID` (or `last_id`); or read once as JSON."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import GlideMQError, JobNotFoundError
from ..job.streams import check_read
from ..keys import validate_job_id
from ..web.sse import Event, event_stream
from .feeds import QueueFeed, Watch, follow_chunks
from .http import json_response
from .state import Proxy, proxy_of
from .streams import dump, opening, problem_event
from .table import Spec

__all__ = ["SPECS"]

_FINISHED = ("completed", "failed")


async def _job_state(proxy: Proxy, queue: str, job_id: str) -> str:
    """The job's state; JobNotFoundError (404) when the queue or the job is unknown."""
    job = await (await proxy.admin.view(queue)).get_job(job_id)
    if job is None:
        raise JobNotFoundError(queue, job_id)
    return str(job.state)


def _last_id(request: Request) -> str | None:
    """Where to resume: the `last_id` parameter, else the `Last-Event-ID` header."""
    raw = request.query_params.get("last_id") or request.headers.get("last-event-id") or None
    check_read(raw, None)  # ValidationError("last_id") for a bad id
    return raw


async def _chunks(
    proxy: Proxy, feed: QueueFeed, watch: Watch, job_id: str, last: str | None
) -> AsyncIterator[Event]:
    queue = feed.name
    yield Event("ready", dump({"queue": queue, "job_id": job_id, "last_id": last}))
    try:
        async for chunk in follow_chunks(feed, watch, job_id, last):
            yield Event("chunk", dump(chunk.data), chunk.id)
        view = await proxy.admin.view(queue, must_exist=False)
        job = await view.get_job(job_id)
    except GlideMQError as exc:  # the server went away: say so and end, no traceback
        yield problem_event(exc)
        return
    yield Event("end", dump({"state": None if job is None else job.state}))


async def follow_output(request: Request) -> Response:
    """Follow a job's output stream: a `ready` event, one `chunk` event per chunk (data: the
    chunk as JSON, id: its entry id), and an `end` event with the job's final state once
    the job finished and every chunk was sent. Resumes after `last_id` or `Last-Event-ID`."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    job_id = validate_job_id(request.path_params["job_id"], "job_id")
    last = _last_id(request)
    await _job_state(proxy, queue, job_id)
    feed, admitted = await opening(proxy, lambda: proxy.feeds.queue(queue))
    watch = feed.watch(job_id)

    def close() -> None:
        feed.unwatch(watch)
        proxy.feeds.release(feed)
        admitted()

    return event_stream(_chunks(proxy, feed, watch, job_id, last), on_close=close)


async def read_output(request: Request) -> Response:
    """The chunks a job streamed after `last_id` (from the first kept without it), at most
    1000 a call: `{chunks: [{id, data}], last_id, finished}`; ask again with `last_id`."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    job_id = validate_job_id(request.path_params["job_id"], "job_id")
    last = _last_id(request)
    state = await _job_state(proxy, queue, job_id)
    async with proxy.using(queue) as q:
        chunks = await q.read_stream(job_id, last)
    body: dict[str, Any] = {
        "chunks": [{"id": c.id, "data": c.data} for c in chunks],
        "last_id": chunks[-1].id if chunks else last,
        "state": state,
        "finished": state in _FINISHED and not chunks,
    }
    return json_response(body)


_J = "/queues/{queue}/jobs/{job_id}"
SPECS = [
    Spec(
        "GET",
        _J + "/stream",
        follow_output,
        "Follow a job's output stream",
        "streams",
        query={"last_id": "string"},
        sse=True,
    ),
    Spec(
        "GET",
        _J + "/stream/chunks",
        read_output,
        "Read a job's output stream",
        "streams",
        query={"last_id": "string"},
    ),
]
