"""The dashboard's ASGI application: authentication, security headers, error pages and the
routes (pages in `pages`, actions in `actions`, live updates in `live`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..admin.session import Admin
from ..client.connection import ConnectionLike
from ..errors import GlideMQError, ValidationError
from ..keys import DEFAULT_PREFIX
from ..web.auth import AuthHook, AuthorizeHook, BasicAuth, check_auth
from ..web.capacity import DEFAULT_MAX_STREAMS, StreamsFull
from ..web.errors import SecurityHeaders, status_for
from ..web.hosts import HostGuard, allowed_hosts_of
from . import actions, live, pages
from .state import HERE, Dashboard

__all__ = ["MAX_REFRESH", "MIN_REFRESH", "Dashboard", "create_app"]

MIN_REFRESH = 0.1
"""Fewest seconds between live updates: faster polling would keep a core busy per page."""
MAX_REFRESH = 3600.0


class _Guard:
    """ASGI middleware: authentication before anything else is served."""

    def __init__(self, app: ASGIApp, basic: BasicAuth | None, hook: AuthHook | None) -> None:
        self.app = app
        self.basic = basic
        self.hook = hook

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (self.basic is not None or self.hook is not None):
            refusal = await check_auth(Request(scope, receive), self.basic, self.hook)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    connection: ConnectionLike | Admin = None,
    *,
    prefix: str = DEFAULT_PREFIX,
    read_only: bool = False,
    auth: AuthHook | None = None,
    basic_auth: BasicAuth | None = None,
    authorize: AuthorizeHook | None = None,
    queues: Sequence[str] | None = None,
    names_ttl: float = 30.0,
    refresh: float = 2.0,
    title: str = "glidemq",
    allowed_hosts: Sequence[str] | None = None,
    max_streams: int = DEFAULT_MAX_STREAMS,
) -> Starlette:
    """The dashboard as an ASGI app, to serve alone or mount in another service.

    `connection`: a URL, `ConnectionOptions`, None for `GLIDEMQ_URL`, or an open `Admin`
    (then closing it is the caller's business). `read_only` hides every action and refuses
    them with 403. `auth` is called with each request and must return True (or an awaitable
    of True) to let it through; `basic_auth` asks the browser for a user and password;
    `authorize(request, action, queue)` is asked before each action and must return True
    (or an awaitable of True) to let it run, else the action is refused with 403.
    `queues` names the queues to show instead of scanning for them; the scanned list is
    cached `names_ttl` seconds. Live views poll the server every `refresh` seconds (0.1 to
    3600). `allowed_hosts`: the `Host` names it answers besides the loopback ones (a name,
    an address, `*.example.com`, or `*` for any), the defence against DNS rebinding; a
    request naming another host gets 400 (docs/DASHBOARD.md). `max_streams`: live feeds
    open at once (each polls the server every `refresh` seconds); past it, or with too few
    file descriptors left, `/live` answers 503 with `Retry-After`.
    """
    if (
        isinstance(refresh, bool)
        or not isinstance(refresh, int | float)
        or not MIN_REFRESH <= refresh <= MAX_REFRESH  # also refuses nan
    ):
        raise ValidationError(
            "refresh", f"must be a number of seconds from {MIN_REFRESH:g} to {MAX_REFRESH:g}"
        )
    hosts = allowed_hosts_of(allowed_hosts)
    owned = not isinstance(connection, Admin)
    admin = connection if isinstance(connection, Admin) else Admin(connection, prefix=prefix)
    dash = Dashboard(
        admin,
        read_only=read_only,
        authorize=authorize,
        queues=queues,
        names_ttl=names_ttl,
        refresh=float(refresh),
        title=title,
        max_streams=max_streams,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        dash.warm_up()
        yield
        if owned:
            await dash.close()

    async def on_error(request: Request, exc: Exception) -> Response:
        status = status_for(exc)
        message = str(exc) if status < 500 or isinstance(exc, GlideMQError) else "internal error"
        page = dash.render(
            request, "error.html", http_status=status, status_code=status, message=message
        )
        if isinstance(exc, StreamsFull):
            page.headers["retry-after"] = str(exc.retry_after)
            page.headers["connection"] = "close"  # its socket is freed at once
        return page

    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/workers", pages.workers, name="workers"),
        Route("/queue", pages.queue, name="queue"),
        Route("/job", pages.job, name="job"),
        Route("/live", live.stream, name="live"),
        Route("/action", actions.act, methods=["POST"], name="action"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(HostGuard, hosts=hosts),
            Middleware(_Guard, basic=basic_auth, hook=auth),
        ],
        exception_handlers={GlideMQError: on_error},
        lifespan=lifespan,
    )
    app.state.dashboard = dash
    return app
