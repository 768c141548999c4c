"""Retry delays: fixed, exponential, or a named custom strategy, with optional jitter."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from ..types import BackoffStrategy

__all__ = ["MAX_DELAY_MS", "retry_delay"]

MAX_DELAY_MS = 2**31 - 1


def retry_delay(
    backoff: Any,
    attempts_made: int,
    error: BaseException,
    strategies: Mapping[str, BackoffStrategy],
) -> int:
    """Milliseconds to wait before the next try, given the job's wire `backoff` option.

    `backoff` is None, a number (fixed delay), or `{type, delay, jitter}`. A negative result
    means: do not retry. An unknown strategy name raises KeyError.
    """
    if backoff is None:
        return 0
    if isinstance(backoff, int | float) and not isinstance(backoff, bool):
        return max(0, int(backoff))
    if not isinstance(backoff, Mapping):
        return 0
    kind = backoff.get("type", "fixed")
    base = int(backoff.get("delay", 0) or 0)
    if kind == "fixed":
        delay = base
    elif kind == "exponential":
        delay = base * 2 ** max(0, attempts_made - 1)
    else:
        delay = int(strategies[kind](attempts_made, error))
        if delay < 0:
            return -1
    jitter = float(backoff.get("jitter", 0) or 0)
    if jitter > 0 and delay > 0:
        delay -= int(random.uniform(0, min(jitter, 1.0) * delay))
    return min(delay, MAX_DELAY_MS)
