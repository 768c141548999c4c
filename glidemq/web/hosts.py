"""Which `Host` a web face answers to: the defence against DNS rebinding.

A page on another site can make a browser resolve its own name to 127.0.0.1 and talk to a
face listening there; the browser then sends that site's name as `Host` (and `Origin`), and
treats the answers as same-origin. So every request must name an allowed host, and a
request that carries an `Origin` must come from one. By default the loopback names are
allowed (`localhost`, `127.0.0.1`, `::1`); the command-line tools add the address they bind
to (unless it is every address, 0.0.0.0 or ::), and more come from `allowed_hosts` /
`--allow-host`: a name or address, `*.example.com` for every subdomain of example.com, or
`*` for any host (the check off).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ValidationError

__all__ = [
    "LOOPBACK_HOSTS",
    "AllowedHosts",
    "HostGuard",
    "allowed_hosts_of",
    "origin_allowed",
]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_SCOPE_KEY = "glidemq.allowed_hosts"
_REFUSED = b"host not allowed: add it with allowed_hosts / --allow-host"


_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")


def _hostname(netloc: str) -> str | None:
    """The host of a `Host` header or an origin's netloc (`name`, `name:port`, `[v6]:port`),
    lower case, without port, brackets or a final dot; None when it is not well formed."""
    text = netloc.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[1:end], text[end + 1 :]
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    host, colon, port = text.partition(":")
    if colon and not (port.isdigit() and len(port) <= 5):
        return None
    if not _NAME.fullmatch(host) or len(host) > 253:
        return None
    return host.rstrip(".")


class AllowedHosts:
    """A set of allowed host names and addresses, with `*.domain` patterns and `*`."""

    __slots__ = ("any", "exact", "suffixes")

    def __init__(self, hosts: Iterable[str] = LOOPBACK_HOSTS) -> None:
        self.any = False
        self.exact: set[str] = set()
        self.suffixes: list[str] = []
        for raw in hosts:
            self.add(raw)

    def add(self, raw: str) -> None:
        """Allow one more host (a name, an address, `*.domain` or `*`)."""
        if not isinstance(raw, str) or not raw.strip():
            raise ValidationError("allowed_hosts", f"must be host names, not {raw!r}")
        text = raw.strip().lower()
        if text == "*":
            self.any = True
            return
        if text.startswith("*."):
            rest = _hostname(text[2:])
            if rest is None:
                raise ValidationError("allowed_hosts", f"not a host pattern: {raw!r}")
            self.suffixes.append("." + rest)
            return
        host = _hostname(f"[{text}]" if text.count(":") > 1 else text)
        if host is None:
            raise ValidationError("allowed_hosts", f"not a host name or address: {raw!r}")
        self.exact.add(host)

    def allows(self, netloc: str) -> bool:
        """Whether a `Host` header (or an origin's host[:port]) names an allowed host."""
        host = _hostname(netloc)
        if host is None:
            return False
        if self.any or host in self.exact:
            return True
        return any(host.endswith(s) for s in self.suffixes)

    def __repr__(self) -> str:
        shown = ["*"] if self.any else sorted(self.exact) + [f"*{s}" for s in self.suffixes]
        return f"AllowedHosts({shown})"


def allowed_hosts_of(extra: Sequence[str] | None) -> AllowedHosts:
    """The loopback names and `extra` (None: the loopback names only)."""
    if isinstance(extra, str):
        raise ValidationError("allowed_hosts", "must be a list of host names, not one string")
    hosts = AllowedHosts()
    for raw in extra or ():
        hosts.add(raw)
    return hosts


def origin_allowed(scope: Scope, origin: str) -> bool:
    """Whether `origin` (an Origin header's value) names a host the face allows."""
    hosts = scope.get(_SCOPE_KEY)
    if not isinstance(hosts, AllowedHosts):
        return True  # no guard in front: only the comparison with Host applies
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return bool(netloc) and hosts.allows(netloc)


class HostGuard:
    """ASGI middleware: 400 for an HTTP request whose `Host` is missing or not allowed, and
    403 for one whose `Origin` names a host that is not allowed (the rebinding page's)."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope.get("headers", ()):
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        if host is None or not self.hosts.allows(host):
            await _refuse(send, 400, _REFUSED)
            return
        scope[_SCOPE_KEY] = self.hosts
        if origin is not None and origin != "null" and not origin_allowed(scope, origin):
            await _refuse(send, 403, b"cross-origin request refused")
            return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
