"""Looking into a queue: searching jobs, per-minute metrics, and the workers that serve it.

Costs. `search_jobs` runs on the server, one call per state, and looks at no more than `scan`
jobs of each state (one HMGET each, plus a JSON decode of the data when filtering on it), so
a search costs O(scan) server time however large the queue is; jobs beyond the first `scan`
of a state are not searched. Metrics are counted by the server when a job finishes (one
HINCRBY per completion batch or final failure) in a hash per kind holding the last 24 hours
by minute. Workers register in a hash on every heartbeat (one HSET every few seconds;
glidemq.wire.workers reads and writes it).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from ..client.context import QueueContext
from ..errors import ValidationError
from ..job.job import Job
from ..wire import ops
from ..wire.workers import WorkerInfo, WorkerRegistration, get_workers, workers_key

__all__ = [
    "Metrics",
    "WorkerInfo",
    "WorkerRegistration",
    "get_workers",
    "index_range",
    "state_name",
    "workers_key",
]

J = TypeVar("J", bound=Job[Any, Any])

# The listing states whose names have two words, in their one spelling; the other one (the
# separator swapped) is accepted as input everywhere.
_SPELLINGS = {
    "dead-letter": "dead_letter",
    "waiting_children": "waiting-children",
    "group_waiting": "group-waiting",
    "rate_limited": "rate-limited",
}


def state_name(text: str) -> str:
    """A state name in its one spelling (`dead_letter`, `waiting-children`, `group-waiting`,
    `rate-limited`), given with either separator."""
    name = str(text)
    return _SPELLINGS.get(name, name)


SEARCH_STATES = (
    "waiting",
    "active",
    "prioritized",
    "delayed",
    "completed",
    "failed",
    "dead_letter",
)
METRICS_KINDS = ("completed", "failed")
METRICS_MINUTES = 1440  # kept by the server (METRICS_MINUTES in the library)
_MAX_STARS = 8  # glob stars per name pattern: bounds the matcher's backtracking
_MISSING = object()


# -- search ----------------------------------------------------------------------------------


_ANY_CHAR = b".[\x80-\xbf]*"  # one UTF-8 encoded character


def glob_to_lua(pattern: str) -> bytes:
    """An anchored Lua pattern (bytes, as Lua matches bytes) for what the glob `pattern`
    (`*`, `?`, `[...]`, `[!...]`) matches. A class with non-ASCII characters matches any one
    character here; the caller checks the exact glob afterwards."""
    out = [b"^"]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append(b".*")
        elif c == "?":
            out.append(_ANY_CHAR)
        elif c == "[" and "]" in pattern[i + 2 :]:
            j = pattern.index("]", i + 2)  # a ']' right after '[' or '[!' is a literal
            body = pattern[i + 1 : j]
            if not body.isascii():
                out.append(_ANY_CHAR)
            else:
                neg = body.startswith("!")
                items = [ch if ch.isalnum() or ch == "-" else "%" + ch for ch in body[neg:]]
                out.append(("[" + ("^" if neg else "") + "".join(items) + "]").encode())
            i = j
        elif c.isascii() and not c.isalnum():
            out.append(b"%" + c.encode())
        else:
            out.append(c.encode())
        i += 1
    out.append(b"$")
    return b"".join(out)


def _data_filters(data: Mapping[str, Any] | None) -> list[str]:
    """The field/kind/value triples the server's search takes."""
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ValidationError("data", "must be a mapping of top-level field -> value")
    args: list[str] = []
    for key, value in data.items():
        if not isinstance(key, str) or not key:
            raise ValidationError("data", f"field names must be non-empty strings, got {key!r}")
        if value is None:
            args += [key, "z", ""]
        elif isinstance(value, bool):
            args += [key, "b", "1" if value else "0"]
        elif isinstance(value, int | float):
            args += [key, "n", repr(value)]
        elif isinstance(value, str):
            args += [key, "s", value]
        else:
            raise ValidationError(f"data.{key}", "must be a string, a number, a bool or None")
    return args


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def ascii_lower(text: str) -> str:
    """`text` with only its ASCII letters lowercased (as the server's Lua `string.lower`)."""
    return "".join(c.lower() if c.isascii() else c for c in text)


def _data_text(job: Job[Any, Any]) -> str:
    try:
        return orjson.dumps(job.data).decode()
    except TypeError:
        return str(job.data)


def _matches(
    job: Job[Any, Any], name: str | None, data: Mapping[str, Any] | None, text: str | None
) -> bool:
    if name is not None and not fnmatch.fnmatchcase(job.name, name):
        return False
    if text is not None and text not in ascii_lower(_data_text(job)):
        return False
    if data:
        if not isinstance(job.data, dict):
            return False
        return all(_same(job.data.get(k, _MISSING), v) for k, v in data.items())
    return True


async def search_jobs(
    ctx: QueueContext,
    fetch: Callable[[Sequence[str]], Awaitable[list[J]]],
    *,
    name: str | None,
    state: str | Sequence[str] | None,
    data: Mapping[str, Any] | None,
    limit: int,
    scan: int,
    text: str | None = None,
) -> list[J]:
    """Jobs whose name matches the glob `name`, whose data has the given top-level values
    and whose data's JSON text contains `text` (ASCII case ignored), in the given states
    (default: all), at most `limit` of them."""
    if name is not None and (not isinstance(name, str) or name.count("*") > _MAX_STARS):
        raise ValidationError("name", f"must be a glob pattern with at most {_MAX_STARS} '*'")
    states = SEARCH_STATES if state is None else (state,) if isinstance(state, str) else state
    states = tuple(state_name(s) for s in states)
    for s in states:
        if s not in SEARCH_STATES:
            raise ValidationError("state", f"unknown state {s!r}; one of {SEARCH_STATES}")
    for label, value in (("limit", limit), ("scan", scan)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValidationError(label, "must be an integer >= 1")
    filters = _data_filters(data)
    if text is not None:
        if not isinstance(text, str) or not text:
            raise ValidationError("text", "must be a non-empty string")
        text = ascii_lower(text)
        filters += ["", "t", text]
    pattern = b"" if name in (None, "*") else glob_to_lua(name)
    ids: list[str] = []
    for s in dict.fromkeys(states):  # each state once, in the order given
        wire = "dlq" if s == "dead_letter" else s
        ids += await ops.search_by_name(ctx, wire, pattern, limit - len(ids), scan, filters)
        if len(ids) >= limit:
            break
    jobs = await fetch(ids)
    # The server cannot read compressed data; check every found job here, exactly.
    return [j for j in jobs if _matches(j, name, data, text)]


# -- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Metrics:
    """Jobs finished per minute: `counts[i]` is the count of the minute starting at
    `start + i * 60_000` (epoch ms), oldest first, the current minute last."""

    kind: str
    start: int
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        """Jobs counted in the whole window."""
        return sum(self.counts)

    def points(self) -> list[tuple[int, int]]:
        """(minute start in epoch ms, count) pairs, oldest first."""
        return [(self.start + i * 60_000, c) for i, c in enumerate(self.counts)]


async def get_metrics(ctx: QueueContext, kind: str, minutes: int, now: int) -> Metrics:
    """The per-minute counts of `kind` jobs for the `minutes` minutes up to `now`."""
    if kind not in METRICS_KINDS:
        raise ValidationError("kind", f"must be one of {METRICS_KINDS}, got {kind!r}")
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        raise ValidationError("minutes", "must be an integer")
    if not 1 <= minutes <= METRICS_MINUTES:
        raise ValidationError("minutes", f"must be between 1 and {METRICS_MINUTES}")
    last = now // 60_000
    fields = [str(m) for m in range(last - minutes + 1, last + 1)]
    key = ctx.keys.base + "metrics:" + kind
    values = await ctx.command(lambda c: c.hmget(key, fields))
    counts = tuple(int(v) if v is not None else 0 for v in values)
    return Metrics(kind, (last - minutes + 1) * 60_000, counts)


def index_range(start: int, end: int) -> Any:
    """A ZRANGE by index from `start` to `end` inclusive (negative counts from the end)."""
    from glide import RangeByIndex

    return RangeByIndex(start, end)
