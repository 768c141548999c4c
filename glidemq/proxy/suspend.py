"""Suspend and signal over HTTP: the queue's suspended jobs with why and until when they
wait, and a signal that wakes one (`Queue.get_suspended`, `Queue.signal`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..client.context import QueueContext
from ..errors import JobNotFoundError, JobStateError, ValidationError
from ..keys import validate_job_id
from ..queue.suspend import encode_signal
from .http import field, json_response, query_int, read_json
from .state import proxy_of
from .table import Spec

__all__ = ["SPECS"]

_MAX_PAGE = 1000


def _text(raw: Any) -> str | None:
    if raw is None or raw == b"":
        return None
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


async def _suspension(ctx: QueueContext, key: str) -> list[Any]:
    """The job's suspendReason and suspendUntil fields (set by wire.features.suspend)."""
    fields: list[Any] = await ctx.command(lambda c: c.hmget(key, ["suspendReason", "suspendUntil"]))
    return fields


async def list_suspended(request: Request) -> Response:
    """A page of the queue's suspended jobs, the first deadline first (none last): each
    `{id, name, reason, until, signals}` (`until`: deadline in ms, null for none)."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    limit = query_int(request, "limit", 100)
    offset = query_int(request, "offset", 0)
    if not 1 <= limit <= _MAX_PAGE:
        raise ValidationError("limit", f"must be from 1 to {_MAX_PAGE}")
    if offset < 0:
        raise ValidationError("offset", "must be >= 0")
    view = await proxy.admin.view(queue)  # 404 for an unknown queue
    async with proxy.using(queue) as q:
        jobs = await q.get_suspended(offset, offset + limit - 1)
    out = []
    for job in jobs:
        reason, until = await _suspension(view.ctx, view.keys.job(job.id))
        until_text = _text(until)
        out.append(
            {
                "id": job.id,
                "name": job.name,
                "state": job.state,
                "reason": _text(reason),
                "until": int(until_text) if until_text else None,
                "timestamp": job.timestamp,
                "signals": job.signals,
            }
        )
    async with proxy.using(queue) as q:
        total = await q.get_suspended_count()
    return json_response({"jobs": out, "total": total, "more": offset + len(out) < total})


async def signal(request: Request) -> Response:
    """Wake a suspended job with signal `{name, data}`: it runs again and sees the signal in
    `job.signals`. 409 when the job is not suspended."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    job_id = validate_job_id(request.path_params["job_id"], "job_id")
    body = await read_json(request)
    unknown = sorted(set(body) - {"name", "data"})
    if unknown:
        raise ValidationError(unknown[0], "unknown; send name and data")
    name = field(body, "name", str)
    data = body.get("data")
    encode_signal(name, data)  # ValidationError("name" / "data") before any server call
    await proxy.admin.view(queue)  # 404 for an unknown queue
    try:
        async with proxy.using(queue) as q:
            state = await q.signal(job_id, name, data)
    except JobStateError:
        job = await (await proxy.admin.view(queue)).get_job(job_id)
        if job is None:
            raise JobNotFoundError(queue, job_id) from None
        message = f"job {job_id} is not suspended (it is {job.state}); only a suspended job"
        message += " takes a signal"
        return json_response(
            {"error": "not_suspended", "message": message, "job_id": job_id, "state": job.state},
            409,
        )
    return json_response({"queue": queue, "id": job_id, "signal": name, "state": state})


_Q = "/queues/{queue}"
SPECS = [
    Spec(
        "GET",
        _Q + "/suspended",
        list_suspended,
        "List suspended jobs",
        "jobs",
        query={"limit": "integer", "offset": "integer"},
    ),
    Spec(
        "POST",
        _Q + "/jobs/{job_id}/signal",
        signal,
        "Signal a suspended job",
        "jobs",
        {"name": "string", "data": "any"},
        ("name",),
    ),
]
