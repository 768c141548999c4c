"""CSRF protection for the actions of a web face: a random token per browser session in a
`SameSite=Strict`, HttpOnly cookie, repeated in every form (or the `X-CSRF-Token` header)
and compared in constant time (the double-submit pattern); a request whose `Origin` names
another site is refused as well."""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from .hosts import origin_allowed

__all__ = ["COOKIE", "FIELD", "HEADER", "ensure_token", "origin_ok", "set_cookie", "token_ok"]

COOKIE = "glidemq_csrf"
FIELD = "csrf"
HEADER = "x-csrf-token"
_TOKEN_BYTES = 32


def _cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path") or "") + "/"


def ensure_token(request: Request) -> str:
    """The session's token: the cookie's, or a new one (set by `set_cookie` later)."""
    token = request.cookies.get(COOKIE, "")
    if len(token) < 32:
        token = request.scope.get("csrf_new") or secrets.token_urlsafe(_TOKEN_BYTES)
        request.scope["csrf_new"] = token
    return token


def set_cookie(request: Request, response: Response) -> None:
    """Store a token made by `ensure_token` during this request in the browser."""
    token = request.scope.get("csrf_new")
    if token:
        response.set_cookie(
            COOKIE,
            token,
            path=_cookie_path(request),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )


def origin_ok(request: Request) -> bool:
    """False when the browser says the request comes from another origin: one that is not
    this request's host, or names a host the face does not allow (glidemq.web.hosts)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    try:
        same = urlsplit(origin).netloc == host
    except ValueError:
        return False
    return same and origin_allowed(request.scope, origin)


def token_ok(request: Request, submitted: str | None) -> bool:
    """Whether `submitted` (the form field, else the header) matches the session's cookie."""
    cookie = request.cookies.get(COOKIE, "")
    given = submitted or request.headers.get(HEADER, "")
    if len(cookie) < 32 or not given:
        return False
    return hmac.compare_digest(cookie.encode(), given.encode())
