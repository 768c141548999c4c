"""The wall clock every job time comes from (ms): shared with other processes and languages,
so delays, TTLs and retention assume the clocks of producers and workers roughly agree."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Wall-clock time in ms: job timestamps are shared with other processes and languages."""
    return int(time.time() * 1000)
