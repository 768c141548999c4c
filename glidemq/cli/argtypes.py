"""Value types for the command-line tools' flags (argparse `type=`): each turns the flag's
text into a number or rejects it with a message argparse prints next to the flag."""

from __future__ import annotations

import argparse
import re

__all__ = ["duration_ms", "non_negative_float", "port", "positive_int"]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def non_negative_float(text: str) -> float:
    """A number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def port(text: str) -> int:
    """A TCP port number, 1 to 65535."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def duration_ms(text: str) -> int:
    """A duration with its unit, in ms: `500ms`, `30s`, `10m`, `1h`, `2d` (or `0`)."""
    value = text.strip().lower()
    if value == "0":
        return 0
    m = _DURATION.match(value)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration with a unit (500ms, 30s, 10m, 1h, 2d), got {text!r}"
        )
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)])
