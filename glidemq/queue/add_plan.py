"""What one options object turns into for an add, worked out once per object.

An add needs, from its JobOptions: the stored `opts` JSON, the run header of a bulk add,
whether the lean `glidemq_add` can carry it, and a fresh `opts` dict for the Job it
returns. Programs add with a handful of option objects (the default, a task's, the one a
cached dict coerces to), so each add pays one dict lookup instead of hashing a 25-field
dataclass several times and re-reading its JSON.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import orjson

from ..types import JobOptions, wire_opts
from ..wire import adds

__all__ = ["AddPlan", "plan_for"]

_MAX_PLANS = 512  # past this many distinct objects (fresh options per add) start over


@dataclass(frozen=True, slots=True)
class AddPlan:
    """One options object's share of every add made with it."""

    options: JobOptions
    json: bytes
    """The stored `opts` JSON (`types.wire_opts`)."""
    header: tuple[str | bytes, ...]
    """A bulk add's run header after the job name (`wire.adds.bulk_job` without name and data)."""
    plain: bool
    """Whether `glidemq_add` carries it: no delay, priority, ttl, custom id, group or LIFO."""
    attempts: str
    _stored: dict[str, Any]
    _flat: bool  # no nested values: a shallow copy is a fresh dict

    def stored(self) -> dict[str, Any]:
        """A fresh dict of the stored options, for one Job (callers may change it)."""
        return dict(self._stored) if self._flat else orjson.loads(self.json)


_plans: dict[int, AddPlan] = {}
_lock = threading.Lock()


def plan_for(options: JobOptions) -> AddPlan:
    """The plan of `options`; the same object gives the same plan while it is cached."""
    found = _plans.get(id(options))
    if found is not None and found.options is options:
        return found
    made = _make(options)
    with _lock:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[id(options)] = made  # holds `options`, so its id is not reused meanwhile
    return made


def _make(o: JobOptions) -> AddPlan:
    raw = wire_opts(o)
    stored = orjson.loads(raw)
    return AddPlan(
        options=o,
        json=raw,
        header=adds.bulk_header(raw, o),
        plain=adds.is_plain(o),
        attempts=str(o.attempts),
        _stored=stored,
        _flat=not any(isinstance(v, dict | list) for v in stored.values()),
    )
