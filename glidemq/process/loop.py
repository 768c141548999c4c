"""The event loop glidemq's processes run on: uvloop where it is installed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["loop_factory"]


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor for `asyncio.Runner(loop_factory=...)`, or None (asyncio's
    default loop) where uvloop is missing."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
