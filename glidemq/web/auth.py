"""Who may use a web face: an auth hook (any callable taking the request) and HTTP basic
auth from a file of `user:password` lines. Passwords are compared in constant time; a line
may hold a PBKDF2 hash instead of the password (`hash_password` makes one)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeAlias

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ..errors import ValidationError

__all__ = ["AuthHook", "AuthorizeHook", "BasicAuth", "allowed", "check_auth", "hash_password"]

AuthHook: TypeAlias = Callable[[Request], bool | Awaitable[bool]]
"""Called with every request before it is served; True lets it through, False refuses it
with 403 (or 401 when basic auth is configured). May be async."""

AuthorizeHook: TypeAlias = Callable[[Request, str, str], bool | Awaitable[bool]]
"""Called as `authorize(request, action, queue)` before each action (`retry`, `remove`,
`revoke`, `pause`, ...); True lets it run, False refuses it with 403. May be async."""


async def allowed(hook: AuthorizeHook | None, request: Request, action: str, queue: str) -> bool:
    """Whether `hook` lets `action` on `queue` run (no hook: yes). Only True counts."""
    if hook is None:
        return True
    verdict = hook(request, action, queue)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return verdict is True


_SCHEME = "pbkdf2_sha256"
_ITERATIONS = 200_000


def hash_password(
    password: str, *, salt: bytes | None = None, iterations: int = _ITERATIONS
) -> str:
    """A `pbkdf2_sha256$iterations$salt$hash` string to put in a basic auth file instead of
    the password itself."""
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{_SCHEME}${iterations}${salt.hex()}${digest.hex()}"


def _matches(stored: str, given: str) -> bool:
    if stored.startswith(_SCHEME + "$"):
        try:
            _, rounds, salt, digest = stored.split("$")
            want = bytes.fromhex(digest)
            got = hashlib.pbkdf2_hmac("sha256", given.encode(), bytes.fromhex(salt), int(rounds))
        except ValueError:
            return False
        return hmac.compare_digest(got, want)
    return hmac.compare_digest(stored.encode(), given.encode())


class BasicAuth:
    """HTTP basic auth against `users` (name -> password or PBKDF2 hash)."""

    def __init__(self, users: dict[str, str], realm: str = "glidemq") -> None:
        if not users:
            raise ValidationError("users", "name at least one user")
        self.users = dict(users)
        self.realm = realm

    @classmethod
    def from_file(cls, path: str | Path, realm: str = "glidemq") -> BasicAuth:
        """Users from a file of `user:password` lines (blank lines and `#` comments
        skipped); a clear ValidationError when it is missing or malformed."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValidationError("basic auth file", f"cannot read {path}: {exc.strerror}") from exc
        users: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, password = line.partition(":")
            if not sep or not user or not password:
                raise ValidationError(
                    "basic auth file", f"{path}:{number}: expected 'user:password'"
                )
            users[user] = password
        if not users:
            raise ValidationError("basic auth file", f"{path} names no user")
        return cls(users, realm)

    def user(self, request: Request) -> str | None:
        """The user the request authenticates as, or None."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            return None
        try:
            text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        name, sep, password = text.partition(":")
        if not sep:
            return None
        # Compare against a dummy for unknown users too, so timing does not tell names apart.
        stored = self.users.get(name)
        ok = _matches(stored if stored is not None else "\x00" * 16, password)
        return name if ok and stored is not None else None

    def challenge(self) -> Response:
        """The 401 answer asking the browser for credentials."""
        return PlainTextResponse(
            "authentication required",
            status_code=401,
            headers={"WWW-Authenticate": f'Basic realm="{self.realm}", charset="UTF-8"'},
        )


async def check_auth(
    request: Request, basic: BasicAuth | None, hook: AuthHook | None
) -> Response | None:
    """None when the request may go on, else the refusal to send (401 or 403)."""
    if basic is not None:
        user = basic.user(request)
        if user is None:
            return basic.challenge()
        request.scope["user_name"] = user
    if hook is not None:
        verdict = hook(request)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not verdict:
            return PlainTextResponse("forbidden", status_code=403)
    return None
