"""Keep valkey-glide's replies flowing while a thread blocks in a sync call.

valkey-glide hands every async reply of the process to one pipe, read by the event loop on
which the first client was created; clients on other loops get theirs forwarded from there.
A thread blocked in a sync call while running that loop (a coroutine in Jupyter calling
`glidemq.sync`, an async task calling `Task.delay`) would stop every reply, its own
included; a loop that stopped or closed stops them too. So before blocking, the sync API
moves the reading to its own loop, which never blocks. Nothing is done when the installed
valkey-glide reads its replies some other way.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["keep_replies_flowing"]

_glide: Any
try:
    from glide import glide_client as _glide
except ImportError:  # pragma: no cover - valkey-glide is a dependency
    _glide = None

_NAMES = ("_async_pipe_lock", "_async_pipe_loop", "_async_pipe_registered")
_ready = _glide is not None and all(hasattr(_glide, n) for n in (*_NAMES, "_async_pipe_read_fd"))


def _caller_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def keep_replies_flowing(sync_loop: asyncio.AbstractEventLoop) -> None:
    """Before the calling thread blocks on `sync_loop`: if valkey-glide's replies are read
    by a loop that cannot read them meanwhile (the caller's own, or one stopped), have
    `sync_loop` read them instead."""
    if not _ready:
        return
    glide: Any = _glide
    owner = glide._async_pipe_loop  # noqa: SLF001
    if owner is None or owner is sync_loop:
        return
    if owner.is_running() and not owner.is_closed() and owner is not _caller_loop():
        return  # read in a thread of its own, which does not wait on us
    with glide._async_pipe_lock:  # noqa: SLF001
        owner = glide._async_pipe_loop  # noqa: SLF001
        fd = glide._async_pipe_read_fd  # noqa: SLF001
        if owner is None or owner is sync_loop or fd < 0 or not glide._async_pipe_registered:  # noqa: SLF001
            return
        if not owner.is_closed():
            with contextlib.suppress(Exception):  # a loop being torn down
                owner.remove_reader(fd)
        glide._async_pipe_loop = sync_loop  # noqa: SLF001
        reader = glide._on_async_pipe_readable  # noqa: SLF001
        sync_loop.call_soon_threadsafe(sync_loop.add_reader, fd, reader)
