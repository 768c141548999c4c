"""The `glidemq` Valkey Function library: its source, its version, and loading it.

The library's source is the files of `lua/` (package data), one per concern, joined in the
order LIBRARY_FILES lists into the one library `glidemq`; the version is written into it when
it is loaded. Change any of the files, bump `LIBRARY_VERSION` and update
`LIBRARY_SOURCE_SHA256` (the SHA-256 of the joined text) together (a test enforces it).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import weakref
from functools import cache
from importlib import resources
from typing import Any

from glide import AllPrimaries, GlideClusterClient
from glide import RequestError as _RequestError

from ..errors import ForeignLibraryError, LibraryError, ServerError
from .connection import Client, ConnectionOptions, close_client, create_client
from .retry import is_missing_function, retrying

__all__ = [
    "LIBRARY_FILES",
    "LIBRARY_NAME",
    "LIBRARY_SOURCE_SHA256",
    "LIBRARY_VERSION",
    "MARKER_FUNCTION",
    "MARKER_VALUE",
    "UNCONFIRMED_WRITES",
    "connect_with_library",
    "ensure_library",
    "library_parts",
    "library_source",
    "needs_no_wait",
    "read_only_functions",
]

LIBRARY_NAME = "glidemq"
LIBRARY_VERSION = 34
LIBRARY_SOURCE_SHA256 = "08f20cef60fb4196091aca73a755a67acbb94ae468c72b351ffc2a26d721ec7c"
LIBRARY_FILES = (
    "00_prelude.lua",  # shebang, version placeholder, constants, input checks, shared helpers
    "05_groups.lua",  # group wait sets, fair scheduling across groups, pausing a group
    "10_limits.lua",  # queue-wide limits, groups, token buckets, ordering keys, LIFO
    "15_history.lua",  # a workflow's history and mailbox in its job hash
    "20_ai_native.lua",  # usage, output streams, suspend and signal
    "30_add.lua",  # add, bulk add, dedup, promotion of due jobs
    "40_leave_active.lua",  # leaving the active state: group slots, flow parents told
    "50_fetch_complete.lua",  # activation, complete-and-fetch, blocking-read hand-over
    "60_fail_stall.lua",  # failure, stall recovery, hand-back, heartbeats, delays, rate limits
    "70_flows.lua",  # adding flows and budgets, parents waiting for children
    "75_durable.lua",  # a running workflow's steps, sleeps, waits for events, children
    "80_admin.lua",  # pause/resume, single-job and bulk operations, job schedulers
    "85_groups.lua",  # one group paused, resumed, its limits changed; groups listed
    "90_queries.lua",  # search, counts, job id pages
    "95_broadcast.lua",  # broadcast stream trimming
)
"""The library's source files in `lua/`, in the order they are joined: a file may use the
local functions of the files before it, never of those after it."""
_PLACEHOLDER = "__GLIDEMQ_LIBRARY_VERSION__"
_VERSION_KEY = "{glidemq}:_"
MARKER_FUNCTION = "glidemq_library"
"""Registered by this project's library from version 11 on; answers MARKER_VALUE."""
MARKER_VALUE = "glidemq-python"


def library_parts() -> list[tuple[str, str]]:
    """(file name, text) of every source file of the library as shipped, in LIBRARY_FILES order."""
    lua = resources.files("glidemq").joinpath("lua")
    return [(name, lua.joinpath(name).read_text(encoding="utf-8")) for name in LIBRARY_FILES]


def raw_library_source() -> str:
    """The library's source files joined in order, the version placeholder still in it."""
    return "".join(text for _, text in library_parts())


@cache
def library_source() -> str:
    """The library as loaded into Valkey: the shipped file with its version filled in."""
    src = raw_library_source()
    if _PLACEHOLDER not in src:
        raise LibraryError("the glidemq library source has no version placeholder")
    return src.replace(_PLACEHOLDER, str(LIBRARY_VERSION))


_REGISTRATION = re.compile(r"redis\.register_function\s*[({]\s*(?:function_name\s*=\s*)?'(\w+)'")


UNCONFIRMED_WRITES: dict[str, str] = {
    "glidemq_promote": "moves due jobs to waiting; a lost run is redone by the next tick",
    "glidemq_reclaimStalled": "a lost run is redone by the next stall scan",
    "glidemq_heartbeat": "renews locks; the next heartbeat renews them again",
    "glidemq_expireSuspended": "a lost run is redone by the next tick",
    "glidemq_fireScheduler": "a lost run is redone by the next tick, its job with it",
}
"""Writes no caller is told of, made by a worker's own loops: durability does not wait after
them (a lost one is redone; a later confirmed write on the node confirms it too)."""


@cache
def needs_no_wait() -> frozenset[str]:
    """The library functions durability does not wait after: the read-only ones and
    UNCONFIRMED_WRITES."""
    return read_only_functions() | frozenset(UNCONFIRMED_WRITES)


@cache
def read_only_functions() -> frozenset[str]:
    """The library functions registered with the `no-writes` flag: calls of them change
    nothing, so durability has nothing to confirm after them."""
    src = raw_library_source()
    starts = [(m.start(), m.group(1)) for m in _REGISTRATION.finditer(src)]
    out = set()
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(src)
        if "flags = {'no-writes'}" in src[start:end]:
            out.add(name)
    return frozenset(out)


def source_sha256() -> str:
    """SHA-256 of the joined source files, compared with LIBRARY_SOURCE_SHA256 by the tests."""
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


# -- whose library is it ---------------------------------------------------------------------
# Versions before 11 had no marker; their text always starts with this comment line.
_OWN_HEADER = "-- glidemq server library: every state change of a job is one call into this file."
_OWN_VERSION = re.compile(r"local LIBRARY_VERSION = '(\d+)'")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _libraries(reply: Any) -> list[list[Any]]:
    """FUNCTION LIST replies of every node (a dict per node in a cluster, a list standalone)."""
    if isinstance(reply, dict) and not any(_text(k) == "library_name" for k in reply):
        return [list(v or []) for v in reply.values()]
    return [list(reply or [])]


def _field(lib: Any, name: str) -> Any:
    if isinstance(lib, dict):
        for k, v in lib.items():
            if _text(k) == name:
                return v
        return None
    items = list(lib)
    for i in range(0, len(items) - 1, 2):
        if _text(items[i]) == name:
            return items[i + 1]
    return None


def _function_names(lib: Any) -> list[str]:
    return sorted(_text(_field(f, "name")) for f in _field(lib, "functions") or [])


async def _marked(client: Client) -> bool:
    """Whether every node answers the marker function as ours (the common case: one call)."""
    try:
        if isinstance(client, GlideClusterClient):
            reply = await client.fcall_ro_route(MARKER_FUNCTION, [], AllPrimaries())
            values = list(reply.values()) if isinstance(reply, dict) else [reply]
        else:
            values = [await client.fcall_ro(MARKER_FUNCTION, keys=[_VERSION_KEY])]
    except _RequestError as exc:
        if _is_missing_function(exc):
            return False
        raise
    return bool(values) and all(_text(v) == MARKER_VALUE for v in values)


async def _foreign(client: Client) -> ForeignLibraryError | None:
    """The error to raise when a node's `glidemq` library is not ours, else None (ours at
    any version, or none). Ours: it has the marker function, or (before version 11) its
    text starts with our header and sets LIBRARY_VERSION."""
    if isinstance(client, GlideClusterClient):
        reply = await client.function_list(LIBRARY_NAME.encode(), True, AllPrimaries())
    else:
        reply = await client.function_list(LIBRARY_NAME.encode(), True)
    for libs in _libraries(reply):
        for lib in libs:
            if _text(_field(lib, "library_name")) != LIBRARY_NAME:
                continue  # LIBRARYNAME is a pattern
            names = _function_names(lib)
            if MARKER_FUNCTION in names:
                continue
            code = _text(_field(lib, "library_code") or "")
            if _OWN_HEADER in code and _OWN_VERSION.search(code):
                continue  # ours from before the marker: the version decides
            return ForeignLibraryError(names, await _foreign_version(client))
    return None


async def _foreign_version(client: Client) -> str | None:
    """What the other library's glidemq_version answers, for the error message; read-only
    (FCALL_RO runs only a function flagged no-writes), None when it does not answer."""
    try:
        if isinstance(client, GlideClusterClient):
            reply = await client.fcall_ro_route("glidemq_version", [], AllPrimaries())
            values = list(reply.values()) if isinstance(reply, dict) else [reply]
            return _text(values[0]) if values else None
        return _text(await client.fcall_ro("glidemq_version", keys=[_VERSION_KEY]))
    except _RequestError:
        return None


# one lock per event loop: an asyncio.Lock must not be shared between loops
_load_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def ensure_library(client: Client) -> None:
    """Load the library (on all primaries of a cluster) unless this exact version is there.

    Loading is `FUNCTION LOAD REPLACE` of identical text, so many processes doing it at once
    is harmless. A newer version on the server is never replaced by an older client, and a
    library named `glidemq` that is not this project's raises ForeignLibraryError: it is
    neither replaced nor used.
    """
    loop = asyncio.get_running_loop()
    lock = _load_locks.get(loop)
    if lock is None:
        lock = _load_locks[loop] = asyncio.Lock()
    async with lock:
        what = "cannot load the glidemq function library"
        try:
            # Reading versions and loading identical text are both safe to repeat.
            if not await retrying(_marked, lambda: client, what=what, safe=True):
                foreign = await retrying(_foreign, lambda: client, what=what, safe=True)
                if foreign is not None:
                    raise foreign
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
