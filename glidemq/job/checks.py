"""The checks and rules of a job's methods, applied before anything is sent."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ValidationError
from ..types import MAX_DELAY, MAX_PRIORITY

__all__ = [
    "check_delay",
    "check_next_step",
    "check_priority",
    "check_progress",
    "check_run_at",
    "retry_source",
]

_RETRY_SOURCES = {"failed": "failed", "completed": "completed", "dead_letter": "dlq"}


def retry_source(state: str) -> str:
    """The finished set `retry` and `retry_jobs` take jobs from, or ValidationError."""
    source = _RETRY_SOURCES.get(state)
    if source is None:
        raise ValidationError("state", f"can retry failed, completed or dead_letter, not {state!r}")
    return source


def check_progress(progress: object) -> None:
    """ValidationError unless `progress` is a number or a mapping."""
    if isinstance(progress, bool) or not isinstance(progress, int | float | Mapping):
        raise ValidationError("progress", "must be a number or a mapping")


def check_priority(priority: object) -> None:
    """ValidationError unless `priority` is an integer from 0 to MAX_PRIORITY."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError("priority", "must be an integer")
    if not 0 <= priority <= MAX_PRIORITY:
        raise ValidationError("priority", f"must be between 0 and {MAX_PRIORITY}")


def check_delay(delay: object) -> None:
    """ValidationError unless `delay` is an integer from 0 to MAX_DELAY (ms)."""
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY:
        raise ValidationError("delay", f"must be an integer from 0 to {MAX_DELAY} (ms)")


def check_run_at(timestamp_ms: object, now: int) -> None:
    """ValidationError unless `timestamp_ms` is an integer time no later than now + MAX_DELAY."""
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
        raise ValidationError("timestamp_ms", "must be an integer time in ms")
    if not 0 <= timestamp_ms <= now + MAX_DELAY:
        raise ValidationError("timestamp_ms", f"must be from 0 to now + {MAX_DELAY} ms")


def check_next_step(next_step: object) -> None:
    """ValidationError unless `next_step` is None or a non-empty string."""
    if next_step is not None and (not isinstance(next_step, str) or not next_step):
        raise ValidationError("next_step", "must be a non-empty string or None")
