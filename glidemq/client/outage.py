"""Since when calls to a server have been failing, for this process: one record per server
address, opened by the first call that timed out or lost its connection and closed by the
next call that succeeds. An error can then say what happened ("connection to
127.0.0.1:6379 lost at 10:21:03, 40.2 s ago") instead of only that a call timed out.
"""

from __future__ import annotations

import time

__all__ = ["OPEN", "describe", "failed", "lost_since", "ok"]

OPEN: dict[str, float] = {}
"""Address text -> wall time the failing calls began. Read-only outside this module: a
caller on a hot path checks that it is empty before calling `ok`."""


def failed(where: str | None, began: float | None = None) -> None:
    """A call to `where` failed by a time-out or a lost connection; `began` (wall time) is
    when that call was sent, the latest moment the server was known to be fine."""
    if where is not None and where not in OPEN:
        OPEN[where] = time.time() if began is None else began


def ok(where: str | None) -> None:
    """A call to `where` succeeded: the outage, if any, is over."""
    if OPEN and where is not None:
        OPEN.pop(where, None)


def lost_since(where: str | None) -> float | None:
    """Wall time since which calls to `where` fail, or None when they do not."""
    return None if where is None else OPEN.get(where)


def describe(where: str | None) -> str:
    """'connection to WHERE lost at HH:MM:SS (N s ago)', or '' when no outage is known."""
    since = lost_since(where)
    if since is None:
        return ""
    at = time.strftime("%H:%M:%S", time.localtime(since))
    return f"connection to {where} lost at {at} ({time.time() - since:.1f} s ago)"
