"""Groups over HTTP: list a queue's groups, read one, pause and resume it, change its limits
for the running workers (`Queue.get_groups`, `pause_group`, `set_group_concurrency`, ...)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import ValidationError
from ..options.limits import RateLimit, check_key
from ..queue.groups import GroupInfo
from .http import json_response, read_json
from .state import proxy_of
from .table import Spec

__all__ = ["SPECS"]

_LIMITS = ("concurrency", "rate_limit", "max_size")


def _key(request: Request) -> str:
    key = str(request.path_params["key"])
    check_key("key", key)
    return key


def _found(queue: str, key: str, group: GroupInfo | None) -> Response:
    if group is None:
        message = f"queue {queue!r} has no group {key!r}"
        return json_response({"error": "not_found", "message": message}, 404)
    return json_response(group)


async def list_groups(request: Request) -> Response:
    """Every group of the queue: waiting, parked, active, paused and limits of each."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    view = await proxy.admin.view(queue)  # 404 for an unknown queue
    return json_response({"queue": queue, "groups": await view.get_groups()})


async def get_group(request: Request) -> Response:
    """One group (404 when the queue has no such group)."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    key = _key(request)
    view = await proxy.admin.view(queue)
    return _found(queue, key, await view.get_group(key))


async def pause_group(request: Request) -> Response:
    """Stop the group's jobs from starting (the other groups go on); the group after it."""
    return await _pause_or_resume(request, pause=True)


async def resume_group(request: Request) -> Response:
    """Let the group's jobs start again; the group after it."""
    return await _pause_or_resume(request, pause=False)


async def _pause_or_resume(request: Request, *, pause: bool) -> Response:
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    key = _key(request)
    await read_json(request)
    view = await proxy.admin.view(queue)
    await (view.pause_group(key) if pause else view.resume_group(key))
    return _found(queue, key, await view.get_group(key))


async def set_limits(request: Request) -> Response:
    """Change the limits named in the body, each effective from the workers' next fetch:
    `concurrency`, `rate_limit` ({max, duration}) and `max_size`; null clears one."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    key = _key(request)
    body = await read_json(request)
    unknown = sorted(set(body) - set(_LIMITS))
    if unknown:
        raise ValidationError(unknown[0], f"unknown; send any of {', '.join(_LIMITS)}")
    if not body:
        raise ValidationError("body", f"send any of {', '.join(_LIMITS)}")
    rate: Any = body.get("rate_limit")
    if rate is not None:
        rate = RateLimit.coerce("rate_limit", rate)
    view = await proxy.admin.view(queue)
    if "concurrency" in body:
        await view.set_group_concurrency(key, body["concurrency"])
    if "rate_limit" in body:
        await view.set_group_rate_limit(key, rate)
    if "max_size" in body:
        await view.set_max_group_size(key, body["max_size"])
    return _found(queue, key, await view.get_group(key))


_G = "/queues/{queue}/groups"
SPECS = [
    Spec("GET", _G, list_groups, "List the queue's groups", "groups"),
    Spec("GET", _G + "/{key}", get_group, "Get a group", "groups"),
    Spec("POST", _G + "/{key}/pause", pause_group, "Pause a group", "groups", {}),
    Spec("POST", _G + "/{key}/resume", resume_group, "Resume a group", "groups", {}),
    Spec(
        "POST",
        _G + "/{key}/limits",
        set_limits,
        "Change a group's limits",
        "groups",
        {"concurrency": "integer", "rate_limit": "object", "max_size": "integer"},
    ),
]
