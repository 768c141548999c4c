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
from glide import ClosingError as _GlideClosing
from glide import ConnectionError as _GlideConnectionError
from glide import GlideError as _GlideError
from glide import RequestError as _RequestError
from glide import TimeoutError as _GlideTimeout

from .connection import Client
from .errors import ConnectionError, LibraryError, ServerError

__all__ = [
    "LIBRARY_NAME",
    "LIBRARY_SOURCE_SHA256",
    "LIBRARY_VERSION",
    "call",
    "ensure_library",
    "library_source",
]

LIBRARY_NAME = "glidemq"
LIBRARY_VERSION = 8
LIBRARY_SOURCE_SHA256 = "5c66a9cf72755d6b712e390874f9384d7be9f2d0530d47fbc908425380256716"
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


def _is_missing_function(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "function not found" in text or "no such function" in text


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


_TRANSPORT = (_GlideConnectionError, _GlideClosing, _GlideTimeout)
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
        try:
            versions = await _loaded_versions(client)
            if all(v == LIBRARY_VERSION for v in versions):
                return
            newer = [v for v in versions if v is not None and v > LIBRARY_VERSION]
            if newer:
                raise LibraryError(
                    f"the server has glidemq library version {max(newer)}, newer than this "
                    f"client's {LIBRARY_VERSION}: upgrade glidemq"
                )
            if isinstance(client, GlideClusterClient):
                await client.function_load(library_source(), True, AllPrimaries())
            else:
                await client.function_load(library_source(), True)
        except _TRANSPORT as exc:
            raise ConnectionError(f"cannot load the glidemq function library: {exc}") from exc
        except _RequestError as exc:
            raise LibraryError(f"cannot load the glidemq function library: {exc}") from exc
        except _GlideError as exc:
            raise ConnectionError(f"cannot load the glidemq function library: {exc}") from exc


async def call(
    client: Client, function: str, keys: Sequence[str], args: Sequence[str | bytes]
) -> Any:
    """FCALL a library function; reload the library once if the server lost it (restart)."""
    for attempt in (1, 2):
        try:
            return await client.fcall(function, keys=list(keys), arguments=list(args))
        except _TRANSPORT as exc:
            raise ConnectionError(f"{function}: {type(exc).__name__}: {exc}") from exc
        except _RequestError as exc:
            if attempt == 2 or not _is_missing_function(exc):
                raise ServerError(f"{function}: {exc}") from exc
        except _GlideError as exc:
            raise ConnectionError(f"{function}: {exc}") from exc
        await ensure_library(client)
    raise AssertionError("unreachable")
