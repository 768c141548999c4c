"""The proxy's ASGI application: authentication (the dashboard's hook and basic auth),
security headers, the routes of the route table with their errors turned into JSON
answers, `/health` and `/openapi.json`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..client.connection import ConnectionLike
from ..keys import DEFAULT_PREFIX
from ..web.auth import AuthHook, BasicAuth, check_auth
from ..web.errors import SecurityHeaders
from ..web.hosts import HostGuard, allowed_hosts_of
from . import flows, groups, output, queues, streams, suspend
from .http import error_response, json_response
from .state import DEFAULT_MAX_QUEUES, DEFAULT_MAX_STREAMS, Proxy, proxy_of
from .table import Handler, Spec, openapi

__all__ = ["SPECS", "create_app"]

_STATIC = Path(__file__).resolve().parent / "static"


async def health(request: Request) -> Response:
    """200 `{"status": "ok"}` when the server answers, else 503."""
    view = await proxy_of(request).admin.view("health", must_exist=False)
    await view.ctx.command(lambda c: c.ping())
    return json_response({"status": "ok"})


_DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>glidemq proxy API</title>
<link rel="stylesheet" href="docs/static/explorer.css">
<script src="docs/static/explorer.js" defer></script>
</head>
<body>
<header><h1>glidemq proxy API</h1>
<p><span id="version"></span> &middot; every route of <a href="openapi.json">openapi.json</a>,
each with a form that sends a real request to this proxy</p></header>
<main id="ops" aria-live="polite"></main>
</body>
</html>
"""


async def docs(request: Request) -> Response:
    """An API explorer for people: each route with a form that calls it (served from this
    proxy alone, under the same CSP as everything else)."""
    return HTMLResponse(_DOCS_PAGE)


async def schema(request: Request) -> Response:
    """This document."""
    from ..version import __version__

    return json_response(openapi(SPECS, title="glidemq proxy", version=__version__))


SPECS: list[Spec] = [
    Spec("GET", "/health", health, "Is the server reachable", "service"),
    Spec("GET", "/openapi.json", schema, "The OpenAPI schema", "service"),
    Spec("GET", "/docs", docs, "This API in a browser: every route with a form", "service"),
    *queues.SPECS,
    *suspend.SPECS,
    *groups.SPECS,
    *flows.SPECS,
    *streams.SPECS,
    *output.SPECS,
]


def _answering(handler: Handler) -> Handler:
    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:  # every error is a JSON answer; faults only logged
            return error_response(exc)

    answer.__name__ = handler.__name__
    answer.__doc__ = handler.__doc__
    return answer


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
    connection: ConnectionLike = None,
    *,
    prefix: str = DEFAULT_PREFIX,
    queues: Sequence[str] | None = None,
    auth: AuthHook | None = None,
    basic_auth: BasicAuth | None = None,
    max_wait: float = 300.0,
    allowed_hosts: Sequence[str] | None = None,
    max_queues: int = DEFAULT_MAX_QUEUES,
    max_streams: int = DEFAULT_MAX_STREAMS,
) -> Starlette:
    """The HTTP proxy as an ASGI app, to serve alone or mount in another service.

    `connection`: options, a URL, or None for `GLIDEMQ_URL`. `queues`: the only queues (and
    broadcasts) it serves, others get 403; None serves every one. `auth`: called with each
    request, False refuses it (403); `basic_auth`: users and passwords. `max_wait`: the
    longest add-and-wait timeout a caller may ask. Connections open on first use and close
    with the app's lifespan (mounted elsewhere: `await app.state.proxy.close()`).
    `allowed_hosts`: the `Host` names it answers besides the loopback ones (a name, an
    address, `*.example.com`, or `*` for any), the defence against DNS rebinding; a request
    naming another host gets 400, one from another allowed `Origin` 403 (docs/PROXY.md).
    `max_queues`: queues kept open at once for adds, schedulers, stream reads and signals (the
    least recently used idle one is closed to make room; 503 while all are in use).
    `max_streams`: server-sent event streams open at once (the streams of one queue share
    one server connection); past it, or with too few file descriptors left, a stream gets
    503 with `Retry-After`.
    """
    hosts = allowed_hosts_of(allowed_hosts)
    proxy = Proxy(
        connection,
        prefix=prefix,
        queues=queues,
        max_wait=max_wait,
        max_queues=max_queues,
        max_streams=max_streams,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.close()

    routes: list[Route | Mount] = [
        Route(s.path, _answering(s.handler), methods=[s.method], name=s.handler.__name__)
        for s in SPECS
    ]
    routes.append(Mount("/docs/static", app=StaticFiles(directory=_STATIC), name="static"))
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(HostGuard, hosts=hosts),
            Middleware(_Guard, basic=basic_auth, hook=auth),
        ],
        lifespan=lifespan,
    )
    app.state.proxy = proxy
    return app
