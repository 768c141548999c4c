"""How a web face answers an error: the HTTP status for each kind of glidemq error, and
security headers every answer carries."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import errors

__all__ = ["SECURITY_HEADERS", "SecurityHeaders", "status_for"]

SECURITY_HEADERS = {
    # Every script and style is a file of our own; nothing inline, nothing from elsewhere.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


def status_for(exc: BaseException) -> int:
    """400 for bad input, 404 for an unknown queue or job, 409 for an action the job's state
    refuses, 503 when the server cannot be reached or a stream is refused for capacity,
    else 500."""
    from .capacity import StreamsFull

    if isinstance(exc, StreamsFull):
        return 503
    if isinstance(exc, errors.ValidationError):
        return 400
    if isinstance(exc, LookupError):  # JobNotFoundError, QueueNotFoundError
        return 404
    if isinstance(exc, errors.JobStateError):
        return 409
    if isinstance(exc, errors.ConnectionError):
        return 503
    return 500


class SecurityHeaders:
    """ASGI middleware adding `SECURITY_HEADERS` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.raw = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + self.raw
            await send(message)

        await self.app(scope, receive, sending)
