"""What every request of one dashboard shares (`Dashboard`), and the one-shot notice an
action leaves for the page it redirects to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..admin.session import Admin
from ..errors import GlideMQError
from ..keys import validate_queue_name
from ..web import csrf
from ..web.auth import AuthorizeHook
from ..web.capacity import DEFAULT_MAX_STREAMS, StreamGate
from . import format

__all__ = ["NOTICE_COOKIE", "Dashboard", "dashboard_of", "set_notice"]

HERE = Path(__file__).parent
NOTICE_COOKIE = "glidemq_notice"
_NOTICE_MAX = 300


def set_notice(request: Request, response: Response, text: str) -> None:
    """Show `text` once on the next page this browser loads."""
    base = str(request.scope.get("root_path") or "")
    response.set_cookie(
        NOTICE_COOKIE,
        quote(text[:_NOTICE_MAX], safe=""),
        max_age=60,
        path=base + "/",
        httponly=True,
        samesite="strict",
    )


class Dashboard:
    """What every request of one dashboard shares: the admin connection, the options, the
    templates, the cached list of queue names, and the gate of the live feeds."""

    def __init__(
        self,
        admin: Admin,
        *,
        read_only: bool,
        queues: Sequence[str] | None,
        authorize: AuthorizeHook | None = None,
        names_ttl: float,
        refresh: float,
        title: str,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        self.admin = admin
        self.streams = StreamGate(max_streams, log="glidemq.dashboard")
        """Admits the live feeds (`/live`): at most `max_streams` open at once."""
        self.read_only = read_only
        self.authorize = authorize
        self.fixed_queues = None if queues is None else [validate_queue_name(q) for q in queues]
        self.names_ttl = names_ttl
        self.refresh = refresh
        self.title = title
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        format.install(self.env)
        self._names: list[str] | None = None
        self._names_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None

    async def queue_names(self) -> list[str]:
        """Queue names under the prefix. Finding them scans the keyspace, so the list is
        kept for `names_ttl` seconds and refreshed in the background after that."""
        if self.fixed_queues is not None:
            return self.fixed_queues
        if self._refreshing is not None and self._names is None:
            await asyncio.shield(self._refreshing)  # the start-up scan is still running
        if self._names is None or self.names_ttl <= 0:
            self._names = await self.admin.queue_names()
            self._names_at = time.monotonic()
        elif time.monotonic() - self._names_at > self.names_ttl and self._refreshing is None:
            self._refreshing = asyncio.create_task(self._refresh_names())
        return self._names

    async def _refresh_names(self) -> None:
        try:
            self._names = await self.admin.queue_names()
            self._names_at = time.monotonic()
        except GlideMQError:
            pass  # keep the last list; the next page view tries again
        finally:
            self._refreshing = None

    def warm_up(self) -> None:
        """Start finding the queue names now, so the first page view need not wait for the
        keyspace scan (the standalone server calls this at start-up)."""
        if self.fixed_queues is None and self._refreshing is None:
            self._refreshing = asyncio.create_task(self._refresh_names())

    def forget_names(self) -> None:
        """Read the names afresh next time (after an action that can delete a queue)."""
        if self.fixed_queues is None:
            self._names = None

    def render(
        self, request: Request, template: str, http_status: int = 200, **context: Any
    ) -> Response:
        """A page from `template`, with what every page needs in its context."""
        base = str(request.scope.get("root_path") or "")
        notice = request.cookies.get(NOTICE_COOKIE)
        body = self.env.get_template(template).render(
            base=base,
            title=self.title,
            read_only=self.read_only,
            csrf_token=csrf.ensure_token(request),
            here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            notice=unquote(notice)[:_NOTICE_MAX] if notice else None,
            refresh_ms=int(self.refresh * 1000),
            **context,
        )
        response = HTMLResponse(
            body, status_code=http_status, headers={"Cache-Control": "no-store"}
        )
        csrf.set_cookie(request, response)
        if notice:
            response.delete_cookie(NOTICE_COOKIE, path=base + "/")
        return response

    async def close(self) -> None:
        """Close the connection (a task still refreshing names is cancelled)."""
        if self._refreshing is not None:
            self._refreshing.cancel()
        await self.admin.close()


def dashboard_of(request: Request) -> Dashboard:
    """The `Dashboard` serving this request."""
    dash: Dashboard = request.app.state.dashboard
    return dash
