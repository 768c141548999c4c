"""JSON in and out: reading a request body (writes must say `Content-Type:
application/json`, so a cross-site HTML form cannot post), typed fields with the Python
API's names, and the error answers (400 with the field, 403, 404, 409, 500 with an error id
and nothing more)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .. import errors
from ..admin.model import to_jsonable
from ..web.capacity import (
    RETRY_AFTER_S,
    StreamsFull,
    out_of_descriptors,
    warn_out_of_descriptors,
)
from ..web.errors import status_for
from .state import Busy, Forbidden

__all__ = ["MAX_BODY_BYTES", "error_response", "field", "json_response", "read_json"]

MAX_BODY_BYTES = 16 * 1024 * 1024
log = logging.getLogger("glidemq.proxy")
_MISSING = object()


class UnsupportedMedia(errors.ValidationError):
    """A write without `Content-Type: application/json` (answered 415)."""


def json_response(value: Any, status: int = 200) -> Response:
    """`value` (dataclasses and all) as a JSON answer."""
    body = orjson.dumps(to_jsonable(value), option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, media_type="application/json")


async def read_json(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise UnsupportedMedia("content-type", "send application/json")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise errors.ValidationError("body", f"larger than {MAX_BODY_BYTES} bytes")
    if not body.strip():
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.ValidationError("body", "not valid JSON") from None
    if not isinstance(value, dict):
        raise errors.ValidationError("body", "must be a JSON object")
    return value


def field(
    body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = _MISSING
) -> Any:
    """`body[name]` if it has type `kind`; `default` when absent (required without one)."""
    if name not in body or body[name] is None:
        if default is _MISSING:
            raise errors.ValidationError(name, "missing")
        return default
    value = body[name]
    bad_bool = isinstance(value, bool) and bool not in (
        kind if isinstance(kind, tuple) else (kind,)
    )
    if bad_bool or not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise errors.ValidationError(name, f"must be {names.replace('str', 'a string')}")
    return value


def query_int(request: Request, name: str, default: int) -> int:
    """An integer query parameter."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.ValidationError(name, "must be a whole number") from None


def error_response(exc: Exception) -> Response:
    """The answer for `exc`: what the caller did wrong in full, a server fault as an id."""
    if isinstance(exc, UnsupportedMedia):
        return json_response({"error": "unsupported_media_type", "message": str(exc)}, 415)
    if isinstance(exc, Forbidden):
        return json_response({"error": "forbidden", "message": str(exc)}, 403)
    if isinstance(exc, Busy):
        answer = json_response({"error": "busy", "message": str(exc)}, 503)
        answer.headers["retry-after"] = "1"
        return answer
    if isinstance(exc, StreamsFull):
        answer = json_response({"error": "busy", "message": str(exc)}, 503)
        answer.headers["retry-after"] = str(exc.retry_after)
        answer.headers["connection"] = "close"  # its socket is freed at once
        return answer
    if out_of_descriptors(exc):  # one warning a minute, not a traceback per request
        warn_out_of_descriptors("glidemq.proxy", str(exc))
        answer = json_response({"error": "unavailable", "message": "out of file descriptors"}, 503)
        answer.headers["retry-after"] = str(RETRY_AFTER_S)
        answer.headers["connection"] = "close"
        return answer
    if isinstance(exc, errors.ValidationError):
        return json_response(
            {"error": "validation", "field": exc.field, "message": exc.reason}, 400
        )
    if isinstance(exc, errors.JobFailedError):
        body: dict[str, Any] = {"error": "job_failed", "job_id": exc.job_id, "reason": exc.reason}
        return json_response(body, 422)
    if isinstance(exc, errors.JobTimeoutError):
        return json_response({"error": "timeout", "message": str(exc)}, 504)
    if isinstance(exc, errors.DurabilityError):
        # written on the primary, not confirmed: the caller must know which jobs to retry
        body = {"error": "not_confirmed", "job_ids": exc.job_ids, "message": str(exc)}
        return json_response(body, 504)
    if isinstance(exc, errors.QueueFullError):
        return json_response({"error": "queue_full", "message": str(exc)}, 429)
    if isinstance(exc, errors.JobIdsExhaustedError):
        return json_response({"error": "conflict", "message": str(exc)}, 409)
    if isinstance(exc, errors.DuplicateJobError):
        return json_response({"error": "conflict", "message": str(exc)}, 409)
    if isinstance(exc, errors.CrossSlotError):
        return json_response({"error": "cross_slot", "message": str(exc)}, 400)
    status = status_for(exc)
    if status in (404, 409) and isinstance(exc, errors.GlideMQError):
        kind = "not_found" if status == 404 else "conflict"
        return json_response({"error": kind, "message": str(exc)}, status)
    error_id = uuid.uuid4().hex[:16]
    log.error("request failed, error id %s", error_id, exc_info=exc)
    kind = "unavailable" if status == 503 else "internal"
    return json_response({"error": kind, "error_id": error_id}, status)
