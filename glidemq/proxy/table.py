"""The route table: every route with its method, path, handler, summary, body fields and
query parameters. The app's routes and the OpenAPI schema (`/openapi.json`) are both made
from it, so they cannot disagree."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["Handler", "Spec", "openapi"]

Handler = Callable[[Request], Awaitable[Response]]

_TYPES: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object"},
    "array": {"type": "array", "items": {}},
    "strings": {"type": "array", "items": {"type": "string"}},
    "objects": {"type": "array", "items": {"type": "object"}},
    "any": {},
}
_PARAM = re.compile(r"{(\w+)}")


@dataclass(frozen=True)
class Spec:
    """One route. `body`: JSON field -> type name (None: no body); `required`: body fields
    that must be there; `query`: query parameter -> type name; `sse`: answers a stream."""

    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    body: dict[str, str] | None = None
    required: tuple[str, ...] = ()
    query: dict[str, str] = field(default_factory=dict)
    sse: bool = False
    status: int = 200


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR}}}


_ERROR = {
    "type": "object",
    "properties": {
        "error": {"type": "string"},
        "field": {"type": "string", "description": "the Python API's name of the bad field"},
        "message": {"type": "string"},
        "error_id": {"type": "string", "description": "server faults only; details in the log"},
    },
    "required": ["error"],
}


def _operation(spec: Spec) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM.findall(spec.path)
    ]
    params += [
        {"name": name, "in": "query", "required": False, "schema": _TYPES[kind]}
        for name, kind in spec.query.items()
    ]
    ok: dict[str, Any] = {"description": "OK"}
    if spec.sse:
        ok["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
    else:
        ok["content"] = {"application/json": {"schema": {}}}
    op: dict[str, Any] = {
        "summary": spec.summary,
        "operationId": spec.handler.__name__,
        "tags": [spec.tag],
        "parameters": params,
        "responses": {
            str(spec.status): ok,
            "400": _error("bad input; `field` names it"),
            "403": _error("queue outside the allowlist, or refused by the auth hook"),
            "404": _error("no such queue, job or scheduler"),
            "500": _error("server fault; only an error id"),
        },
    }
    answers = op["responses"]
    answers["503"] = _error("Valkey cannot be reached, or every open queue is in use (busy)")
    if spec.method != "GET":
        answers["409"] = _error("the job's state refuses the action, or an id is taken")
    if spec.handler.__name__.startswith("add"):
        answers["429"] = _error("the queue is full (its max_waiting is reached)")
    if spec.handler.__name__ == "add_and_wait":
        answers["422"] = _error("the job failed; `reason` says why")
        answers["504"] = _error("the job did not finish within `timeout`")
    if spec.body is not None:
        op["responses"]["415"] = _error("the body is not application/json")
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {name: _TYPES[kind] for name, kind in spec.body.items()},
        }
        if spec.required:
            schema["required"] = list(spec.required)
        op["requestBody"] = {
            "required": bool(spec.required),
            "content": {"application/json": {"schema": schema}},
        }
    return op


def openapi(specs: Sequence[Spec], *, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `specs`."""
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
    }
