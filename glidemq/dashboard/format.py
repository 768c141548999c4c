"""Jinja filters that turn the admin layer's values into text: times, ages, durations and
pretty JSON. They return plain strings; the templates' autoescaping makes them safe."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any
from urllib.parse import urlencode

import orjson
from jinja2 import Environment

__all__ = ["ago", "install", "pretty", "when"]


def when(ms: int | None) -> str:
    """Epoch ms as a UTC date and time ('' for none)."""
    if not ms:
        return ""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(ms: int | float | None) -> str:
    """A span of ms as '850 ms', '12.5 s', '3m 20s', '2h 5m' or '3d 4h'."""
    if ms is None:
        return ""
    ms = int(ms)
    if abs(ms) < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if abs(s) < 60:
        return f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {s}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h {m}m"
    d, h = divmod(h, 24)
    return f"{d}d {h}h"


def ago(ms: int | None, now: int | None = None) -> str:
    """How long ago (or, for a future time, in how long) epoch ms is."""
    if not ms:
        return ""
    now = int(time.time() * 1000) if now is None else now
    delta = now - ms
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


def as_json(value: Any) -> str:
    """Any value as indented JSON text, strings quoted (what a JSON editor starts from)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return orjson.dumps(repr(value)).decode()


def pretty(value: Any) -> str:
    """Any value as indented JSON text (strings as they are)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return repr(value)


def compact(value: Any, limit: int = 120) -> str:
    """Any value as one line of JSON, cut to `limit` characters."""
    text = value if isinstance(value, str) else pretty(value).replace("\n", " ")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_PERCENT_KEYS = ("percent", "percentage", "progress", "pct", "value")
_RATIO_KEYS = (("done", "total"), ("current", "total"), ("completed", "total"), ("step", "steps"))


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:  # v != v: nan
        return None
    return float(v)


def percent(progress: Any) -> float | None:
    """A progress value as 0..100: a number, or the numeric part of an object
    (`{"percent": 40, ...}`, `{"done": 3, "total": 12}`); None when there is none."""
    if isinstance(progress, dict):
        for key in _PERCENT_KEYS:
            found = _number(progress.get(key))
            if found is not None:
                return max(0.0, min(100.0, found))
        for part, whole in _RATIO_KEYS:
            done, total = _number(progress.get(part)), _number(progress.get(whole))
            if done is not None and total:
                return max(0.0, min(100.0, 100.0 * done / total))
        return None
    found = _number(progress)
    return None if found is None else max(0.0, min(100.0, found))


def query(params: dict[str, Any]) -> str:
    """A URL query string of the non-empty `params` (each value escaped)."""
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})


def install(env: Environment) -> None:
    """Register the filters and helpers on a Jinja environment."""
    env.filters.update(
        when=when,
        ago=ago,
        duration=duration,
        pretty=pretty,
        as_json=as_json,
        compact=compact,
        percent=percent,
    )
    env.globals.update(query=query, now_ms=lambda: int(time.time() * 1000))
