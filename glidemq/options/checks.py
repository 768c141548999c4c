"""Checks shared by the option classes: one rule for "an integer in a range" everywhere."""

from __future__ import annotations

from ..errors import ValidationError

__all__ = ["check_int"]


def check_int(name: str, value: object, *, low: int = 0, high: int | None = None) -> int:
    """`value` if it is an int (not a bool) from `low` to `high`; ValidationError(`name`)
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(name, f"must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValidationError(name, f"must be {bound}, got {value}")
    return value
