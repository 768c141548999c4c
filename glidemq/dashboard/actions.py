"""The dashboard's actions, all posted to one route as HTML forms: retry, remove, promote
and re-prioritize jobs; retry or clean a whole state; pause and resume a queue. Read-only
dashboards refuse them with 403 before anything else; a missing or wrong CSRF token, or a
foreign `Origin`, is refused with 403 too. Each action is one call of the admin layer; the
browser is sent back to the page it came from with a one-line notice."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from ..admin.model import ActionResult, BulkResult, to_jsonable
from ..cli.argtypes import duration_ms
from ..errors import ValidationError
from ..keys import validate_queue_name
from ..web import csrf
from ..web.auth import allowed
from ..web.forms import read_form
from .state import dashboard_of, set_notice

__all__ = ["ACTIONS", "act"]

ACTIONS = (
    "retry",
    "remove",
    "promote",
    "revoke",
    "priority",
    "retry-all",
    "clean",
    "pause",
    "resume",
    "add",
    "update-data",
    "pause-group",
    "resume-group",
)


def _json(form: dict[str, list[str]], name: str, default: str | None) -> Any:
    """A form field holding JSON, decoded; ValidationError naming the field otherwise. An
    empty field is `default`, or refused when there is none (the job's data: `null` must be
    written out, so an emptied text box stores nothing by mistake)."""
    text = (form.get(name) or [""])[0].strip()
    if not text:
        if default is None:
            raise ValidationError(name, "is empty; write the JSON to store (null, {} or a value)")
        text = default
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(name, f"is not JSON: {exc}") from None


_MAX_IDS = 1000


def _one(form: dict[str, list[str]], name: str, default: str | None = None) -> str:
    values = form.get(name)
    if not values or values[0] == "":
        if default is None:
            raise ValidationError(name, "missing")
        return default
    return values[0].strip()


def _ids(form: dict[str, list[str]]) -> list[str]:
    ids = [i for i in form.get("id", []) if i]
    if not ids:
        raise ValidationError("id", "select at least one job")
    if len(ids) > _MAX_IDS:
        raise ValidationError("id", f"at most {_MAX_IDS} jobs at once")
    return ids


def _safe_next(request: Request, target: str | None, fallback: str) -> str:
    """`target` if it is a path of this dashboard, else `fallback` (no open redirect)."""
    base = str(request.scope.get("root_path") or "")
    if target:
        parts = urlsplit(target)
        local = not parts.scheme and not parts.netloc and "\\" not in target
        if local and target.startswith(base + "/") and not target.startswith("//"):
            return target
    return fallback


def _describe(result: Any) -> str:
    if isinstance(result, BulkResult):
        if result.action in ("pause", "resume"):
            return f"{result.queue}: {result.action}d"
        return f"{result.queue}: {result.action}: {result.count} job(s)"
    if isinstance(result, list):
        done = [r for r in result if isinstance(r, ActionResult) and r.ok]
        failed = [r for r in result if isinstance(r, ActionResult) and not r.ok]
        action = result[0].action if result else "action"
        text = f"{action}: {len(done)} done"
        if failed:
            text += "; not done: " + "; ".join(f"{r.id} ({r.detail})" for r in failed[:5])
        return text
    if isinstance(result, str):
        return result
    if isinstance(result, ActionResult):
        return f"{result.action} {result.id}: " + ("done" if result.ok else result.detail)
    return "done"


async def _pause_or_resume(admin: Any, queue: str, action: str, form: dict[str, list[str]]) -> Any:
    """The queue, or one of its groups (form field `group`), paused or resumed."""
    if action == "pause":
        return await admin.pause(queue)
    if action == "resume":
        return await admin.resume(queue)
    key = _one(form, "group")
    await (admin.pause_group if action == "pause-group" else admin.resume_group)(queue, key)
    return f"group {key}: {action.split('-')[0]}d"


async def _run(request: Request, queue: str, action: str, form: dict[str, list[str]]) -> Any:
    admin = dashboard_of(request).admin
    if action == "retry":
        return await admin.retry(queue, _ids(form))
    if action == "remove":
        return await admin.remove(queue, _ids(form))
    if action == "promote":
        return await admin.promote(queue, _ids(form))
    if action == "revoke":
        return await admin.revoke(queue, _ids(form))
    if action == "add":
        opts = _json(form, "opts", "{}")
        if not isinstance(opts, dict):
            raise ValidationError("opts", "must be a JSON object of job options")
        return await admin.add_job(queue, _one(form, "name"), _json(form, "data", None), opts)
    if action == "update-data":
        return await admin.update_data(queue, _ids(form)[0], _json(form, "data", None))
    if action == "priority":
        try:
            priority = int(_one(form, "priority"))
        except ValueError:
            raise ValidationError("priority", "must be a whole number") from None
        return await admin.change_priority(queue, _ids(form)[0], priority)
    if action == "retry-all":
        return await admin.retry_state(queue, _one(form, "state"))
    if action == "clean":
        try:
            grace = duration_ms(_one(form, "grace", "0"))
        except argparse.ArgumentTypeError as exc:
            raise ValidationError("grace", str(exc)) from None
        return await admin.clean(queue, _one(form, "state"), grace)
    if action in ("pause", "resume", "pause-group", "resume-group"):
        return await _pause_or_resume(admin, queue, action, form)
    raise ValidationError("action", f"unknown action {action!r}; one of {', '.join(ACTIONS)}")


async def act(request: Request) -> Response:
    """POST /action: run one action, then redirect back (or answer JSON when asked)."""
    dash = dashboard_of(request)
    if dash.read_only:
        return PlainTextResponse("this dashboard is read-only", status_code=403)
    if not csrf.origin_ok(request):
        return PlainTextResponse("cross-origin request refused", status_code=403)
    form = await read_form(request)
    if not csrf.token_ok(request, (form.get(csrf.FIELD) or [""])[0]):
        return PlainTextResponse("CSRF token missing or wrong; reload the page", status_code=403)
    queue = validate_queue_name(_one(form, "queue"))
    action = _one(form, "action")
    if not await allowed(dash.authorize, request, action, queue):
        return PlainTextResponse(f"not allowed: {action} on queue {queue}", status_code=403)
    if action != "add":  # adding the first job makes a queue
        await dash.admin.view(queue)  # an unknown queue is a 404, not an empty action
    result = await _run(request, queue, action, form)
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse(to_jsonable(result))
    base = str(request.scope.get("root_path") or "")
    fallback = f"{base}/queue?name={quote(queue, safe='')}"
    target = _safe_next(request, (form.get("next") or [""])[0], fallback)
    response = RedirectResponse(target, status_code=303)
    set_notice(request, response, _describe(result))
    return response
