"""The `glidemq` Valkey Function library: its source, its version, and loading it.

The library is the real file `lua/glidemq.lua`, shipped as package data; the version is
written into it when it is loaded. Change the file, bump `LIBRARY_VERSION` and update
`LIBRARY_SOURCE_SHA256` together (a test enforces it).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from glide import AllPrimaries, GlideClusterClient
from glide import RequestError as _RequestError

from .connection import Client, ConnectionOptions, close_client, create_client
from .errors import LibraryError, ServerError
from .retry import DEFAULT_RETRY, RETRY_SAFE_FUNCTIONS, RetryPolicy, is_missing_function, retrying

__all__ = [
    "LIBRARY_NAME",
    "LIBRARY_SOURCE_SHA256",
    "LIBRARY_VERSION",
    "call",
    "connect_with_library",
    "ensure_library",
    "library_source",
]

LIBRARY_NAME = "glidemq"
LIBRARY_VERSION = 12
LIBRARY_SOURCE_SHA256 = "c989f837e942463ff35c89fd9ee7ffd31007b204c6e89c7c0e7b33246b1e6953"
_PLACEHOLDER = "__GLIDEMQ_LIBRARY_VERSION__"
_VERSION_KEY = "{glidemq}:_"


def raw_library_source() -> str:
    """The text of `lua/glidemq.lua` as shipped."""
    return resources.files("glidemq").joinpath("lua/glidemq.lua").read_text(encoding="utf-8")


@cache
def library_source() -> str:
    """The library as loaded into Valkey: the shipped file with its version filled in."""
    src = raw_library_source()
    if _PLACEHOLDER not in src:
        raise LibraryError("lua/glidemq.lua has no version placeholder")
    return src.replace(_PLACEHOLDER, str(LIBRARY_VERSION))


def source_sha256() -> str:
    """SHA-256 of the shipped file, compared with LIBRARY_SOURCE_SHA256 by the test suite."""
    return hashlib.sha256(raw_library_source().encode()).hexdigest()


_is_missing_function = is_missing_function


def _parse_version(value: Any) -> int | None:
    if isinstance(value, bytes):
        value = value.decode()
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


async def _loaded_versions(client: Client) -> list[int | None]:
    """The library version on every primary (None where it is missing)."""
    if isinstance(client, GlideClusterClient):
        try:
            reply = await client.fcall_route("glidemq_version", [], AllPrimaries())
        except _RequestError as exc:
            if _is_missing_function(exc):
                return [None]
            raise
        values = reply.values() if isinstance(reply, dict) else [reply]
        return [_parse_version(v) for v in values]
    try:
        return [_parse_version(await client.fcall("glidemq_version", keys=[_VERSION_KEY]))]
    except _RequestError as exc:
        if _is_missing_function(exc):
            return [None]
        raise


# one lock per event loop: an asyncio.Lock must not be shared between loops
_load_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def ensure_library(client: Client) -> None:
    """Load the library (on all primaries of a cluster) unless this exact version is there.

    Loading is `FUNCTION LOAD REPLACE` of identical text, so many processes doing it at once
    is harmless. A newer version on the server is never replaced by an older client.
    """
    loop = asyncio.get_running_loop()
    lock = _load_locks.get(loop)
    if lock is None:
        lock = _load_locks[loop] = asyncio.Lock()
    async with lock:
        what = "cannot load the glidemq function library"
        try:
            # Reading versions and loading identical text are both safe to repeat.
            versions = await retrying(_loaded_versions, lambda: client, what=what, safe=True)
            if all(v == LIBRARY_VERSION for v in versions):
                return
            newer = [v for v in versions if v is not None and v > LIBRARY_VERSION]
            if newer:
                raise LibraryError(
                    f"the server has glidemq library version {max(newer)}, newer than this "
                    f"client's {LIBRARY_VERSION}: upgrade glidemq"
                )
            await retrying(_load, lambda: client, what=what, safe=True)
        except ServerError as exc:
            if isinstance(exc, LibraryError):
                raise
            raise LibraryError(str(exc)) from exc.__cause__


async def connect_with_library(opts: ConnectionOptions, *, name: str) -> Client:
    """A new client on a server that has this library loaded; the client is closed again
    when loading fails."""
    client = await create_client(opts, name=name)
    try:
        await ensure_library(client)
    except BaseException:
        await close_client(client)
        raise
    return client


async def _load(client: Client) -> None:
    if isinstance(client, GlideClusterClient):
        await client.function_load(library_source(), True, AllPrimaries())
    else:
        await client.function_load(library_source(), True)


async def call(
    client: Client,
    function: str,
    keys: Sequence[str],
    args: Sequence[str | bytes],
    *,
    safe: bool | None = None,
    policy: RetryPolicy = DEFAULT_RETRY,
) -> Any:
    """FCALL a library function, retrying as `glidemq.retry` says; the library is loaded
    again where a node lost it. `safe` (default: from `RETRY_SAFE_FUNCTIONS`) allows a retry
    after a failure that may have run the call."""
    key_list, arg_list = list(keys), list(args)

    async def send(c: Client) -> Any:
        return await c.fcall(function, keys=key_list, arguments=arg_list)

    return await retrying(
        send,
        lambda: client,
        what=function,
        safe=function in RETRY_SAFE_FUNCTIONS if safe is None else safe,
        policy=policy,
        reload_library=ensure_library,
    )
