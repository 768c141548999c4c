"""Routes on one queue and its jobs: adds (one, bulk, add-and-wait), pause, resume, drain,
retry, clean, counts, metrics, workers; a job's detail, listing by state, priority, delay,
data, promote, remove, revoke. Every read and action is a call of the admin layer or `Queue`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..admin.model import ActionResult, JobRow
from ..errors import ValidationError
from ..keys import validate_job_id
from .http import field, json_response, query_int, read_json
from .state import proxy_of
from .table import Spec

__all__ = ["SPECS"]

_JOB_BODY = {"name": "string", "data": "any", "opts": "object"}


def _queue(request: Request) -> str:
    return proxy_of(request).check(request.path_params["queue"])


def _job_id(request: Request) -> str:
    return validate_job_id(request.path_params["job_id"], "job_id")


def _job_json(job: Any) -> Any:
    return None if job is None else JobRow.of(job)


def _action(result: ActionResult) -> Response:
    if result.ok:
        return json_response(result)
    status = 404 if result.detail == "not found" else 409
    return json_response(
        {"error": "not_found" if status == 404 else "conflict", **_res(result)}, status
    )


def _res(result: ActionResult) -> dict[str, Any]:
    return {"message": result.detail, "job_id": result.id, "action": result.action}


async def add_job(request: Request) -> Response:
    """Add one job; `job` is null when a custom id or deduplication skipped it."""
    queue = _queue(request)
    body = await read_json(request)
    name = field(body, "name", str)
    async with proxy_of(request).using(queue) as q:
        job = await q.add(name, body.get("data"), field(body, "opts", dict, None))
    return json_response({"job": _job_json(job)}, 201)


async def add_bulk(request: Request) -> Response:
    """Add several jobs in one round trip; one entry per job (null where skipped)."""
    queue = _queue(request)
    body = await read_json(request)
    items = field(body, "jobs", list)
    jobs: list[tuple[str, Any, Any]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValidationError(f"jobs[{i}]", "must be an object with name, data, opts")
        try:
            jobs.append(
                (field(item, "name", str), item.get("data"), field(item, "opts", dict, None))
            )
        except ValidationError as exc:
            raise ValidationError(f"jobs[{i}].{exc.field}", exc.reason) from None
    async with proxy_of(request).using(queue) as q:
        added = await q.add_bulk(jobs)
    return json_response({"jobs": [_job_json(j) for j in added]}, 201)


async def add_and_wait(request: Request) -> Response:
    """Add a job and answer with its return value once it completed (422 if it failed,
    504 after `timeout` seconds; the job is left alone)."""
    queue = _queue(request)
    proxy = proxy_of(request)
    body = await read_json(request)
    name = field(body, "name", str)
    timeout = float(field(body, "timeout", (int, float), 30.0))
    if not 0 < timeout <= proxy.max_wait:
        raise ValidationError("timeout", f"must be > 0 and <= {proxy.max_wait:g} seconds")
    opts = field(body, "opts", dict, None)
    async with proxy.using(queue) as q:
        result = await q.add_and_wait(name, body.get("data"), opts, timeout=timeout)
    return json_response({"result": result})


async def pause(request: Request) -> Response:
    """Stop workers from taking new jobs of the queue."""
    await read_json(request)
    return json_response(await proxy_of(request).admin.pause(_queue(request)))


async def resume(request: Request) -> Response:
    """Let workers take the queue's jobs again."""
    await read_json(request)
    return json_response(await proxy_of(request).admin.resume(_queue(request)))


async def drain(request: Request) -> Response:
    """Remove every job waiting to run (`delayed`: delayed ones too)."""
    body = await read_json(request)
    delayed = field(body, "delayed", bool, False)
    return json_response(await proxy_of(request).admin.drain(_queue(request), delayed))


async def retry(request: Request) -> Response:
    """Send jobs back to waiting: the ids given, else up to `limit` jobs in `state`."""
    queue = _queue(request)
    body = await read_json(request)
    admin = proxy_of(request).admin
    ids = field(body, "ids", list, None)
    if ids is not None:
        return json_response({"results": await admin.retry(queue, [str(i) for i in ids])})
    state = field(body, "state", str, "failed")
    return json_response(await admin.retry_state(queue, state, field(body, "limit", int, None)))


async def clean(request: Request) -> Response:
    """Remove up to `limit` jobs in `state` older than `grace_ms`."""
    queue = _queue(request)
    body = await read_json(request)
    state = field(body, "state", str, "completed")
    grace = field(body, "grace_ms", int, 0)
    if grace < 0:
        raise ValidationError("grace_ms", "must be >= 0")
    limit = field(body, "limit", int, None)
    return json_response(await proxy_of(request).admin.clean(queue, state, grace, limit))


async def counts(request: Request) -> Response:
    """Jobs in each state."""
    view = await proxy_of(request).admin.view(_queue(request))
    return json_response((await view.get_job_counts()).as_dict())


async def metrics(request: Request) -> Response:
    """Jobs completed (or failed, `kind`) per minute over the last `minutes`."""
    view = await proxy_of(request).admin.view(_queue(request))
    kind = request.query_params.get("kind", "completed")
    return json_response(await view.get_metrics(kind, minutes=query_int(request, "minutes", 60)))


async def workers(request: Request) -> Response:
    """The workers serving the queue, with their heartbeats."""
    view = await proxy_of(request).admin.view(_queue(request))
    return json_response({"workers": await view.get_workers()})


async def list_jobs(request: Request) -> Response:
    """A page of the queue's jobs in the states asked (`state`, repeatable; default all)."""
    queue = _queue(request)
    states = request.query_params.getlist("state")
    page = await proxy_of(request).admin.jobs(
        queue,
        states,
        limit=query_int(request, "limit", 20),
        offset=query_int(request, "offset", 0),
        search=request.query_params.get("search") or None,
    )
    return json_response(page)


async def get_job(request: Request) -> Response:
    """Everything about one job: data, result, state, logs, flow parents and children."""
    queue = _queue(request)
    lines = query_int(request, "log_lines", 100)
    return json_response(
        await proxy_of(request).admin.job(queue, _job_id(request), log_lines=lines)
    )


async def change_priority(request: Request) -> Response:
    """Give a job that has not started a new `priority` (0: none; lower runs first)."""
    queue = _queue(request)
    body = await read_json(request)
    priority = field(body, "priority", int)
    return _action(await proxy_of(request).admin.change_priority(queue, _job_id(request), priority))


async def change_delay(request: Request) -> Response:
    """Run a delayed job `delay` ms from now instead."""
    queue = _queue(request)
    body = await read_json(request)
    delay = field(body, "delay", int)
    return _action(await proxy_of(request).admin.change_delay(queue, _job_id(request), delay))


async def update_data(request: Request) -> Response:
    """Replace the `data` of a job no worker has taken yet (409 once one fetched it, running
    or held, or it finished: the server checks in the call that writes)."""
    queue = _queue(request)
    body = await read_json(request)
    if "data" not in body:
        raise ValidationError("data", "missing: give the new data (null is a value)")
    return _action(await proxy_of(request).admin.update_data(queue, _job_id(request), body["data"]))


async def promote(request: Request) -> Response:
    """Make a delayed job runnable now."""
    queue = _queue(request)
    await read_json(request)
    [result] = await proxy_of(request).admin.promote(queue, [_job_id(request)])
    return _action(result)


async def remove(request: Request) -> Response:
    """Delete a job that is not running."""
    queue = _queue(request)
    [result] = await proxy_of(request).admin.remove(queue, [_job_id(request)])
    return _action(result)


async def revoke(request: Request) -> Response:
    """Cancel a job: one not started fails at once (`revoked`), a running one is aborted by
    its worker (`flagged`)."""
    queue = _queue(request)
    job_id = _job_id(request)
    await read_json(request)
    outcome = await (await proxy_of(request).admin.view(queue)).revoke(job_id)
    return json_response({"queue": queue, "id": job_id, "outcome": outcome})


_Q = "/queues/{queue}"
_J = _Q + "/jobs/{job_id}"
SPECS = [
    Spec("POST", _Q + "/jobs", add_job, "Add a job", "queues", _JOB_BODY, ("name",), status=201),
    Spec(
        "POST",
        _Q + "/jobs/bulk",
        add_bulk,
        "Add jobs in bulk",
        "queues",
        {"jobs": "objects"},
        ("jobs",),
        status=201,
    ),
    Spec(
        "POST",
        _Q + "/jobs/wait",
        add_and_wait,
        "Add a job and wait for its result",
        "queues",
        {**_JOB_BODY, "timeout": "number"},
        ("name",),
    ),
    Spec("POST", _Q + "/pause", pause, "Pause the queue", "queues", {}),
    Spec("POST", _Q + "/resume", resume, "Resume the queue", "queues", {}),
    Spec("POST", _Q + "/drain", drain, "Drain waiting jobs", "queues", {"delayed": "boolean"}),
    Spec(
        "POST",
        _Q + "/retry",
        retry,
        "Retry jobs",
        "queues",
        {"ids": "strings", "state": "string", "limit": "integer"},
    ),
    Spec(
        "POST",
        _Q + "/clean",
        clean,
        "Clean old jobs",
        "queues",
        {"state": "string", "grace_ms": "integer", "limit": "integer"},
    ),
    Spec("GET", _Q + "/counts", counts, "Job counts by state", "queues"),
    Spec(
        "GET",
        _Q + "/metrics",
        metrics,
        "Throughput per minute",
        "queues",
        query={"kind": "string", "minutes": "integer"},
    ),
    Spec("GET", _Q + "/workers", workers, "Live workers", "queues"),
    Spec(
        "GET",
        _Q + "/jobs",
        list_jobs,
        "List jobs by state",
        "jobs",
        query={"state": "strings", "limit": "integer", "offset": "integer", "search": "string"},
    ),
    Spec("GET", _J, get_job, "Get a job", "jobs", query={"log_lines": "integer"}),
    Spec(
        "POST",
        _J + "/priority",
        change_priority,
        "Change a job's priority",
        "jobs",
        {"priority": "integer"},
        ("priority",),
    ),
    Spec(
        "POST",
        _J + "/delay",
        change_delay,
        "Change a delayed job's delay",
        "jobs",
        {"delay": "integer"},
        ("delay",),
    ),
    Spec(
        "POST",
        _J + "/data",
        update_data,
        "Replace a job's data",
        "jobs",
        {"data": "any"},
        ("data",),
    ),
    Spec("POST", _J + "/promote", promote, "Promote a delayed job", "jobs", {}),
    Spec("DELETE", _J, remove, "Remove a job", "jobs"),
    Spec("POST", _J + "/revoke", revoke, "Revoke a job", "jobs", {}),
]
