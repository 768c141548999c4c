"""Usage and cost of model calls: what a job reports, what a flow used, what queues used.

`Job.report_usage` adds one model call to the job (hash field `usage`) and to the queue's
bucket of the current minute in one server call (glidemq.wire.features); a summary reads
those per-minute buckets, never the job hashes, so its cost depends on the time span, not
on how many jobs reported. Buckets are kept for a week.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ValidationError

__all__ = [
    "USAGE_MINUTES",
    "FlowUsage",
    "ModelUsage",
    "TokenLimiter",
    "Usage",
    "UsageSummary",
    "UsageTotals",
]

USAGE_MINUTES = 10080
"""How long the per-minute buckets are kept (minutes): a week."""
SUMMARY_WINDOW = 360  # minutes of buckets one server call sums
_MAX_KINDS = 64
_MAX_COST = 1e15
_MAX_INT = 2**53 - 1


@dataclass(frozen=True, slots=True)
class Usage:
    """What a job's model calls used, summed over its `report_usage` calls.

    `model` and `provider` are those of the latest call that named one.
    """

    model: str | None
    provider: str | None
    calls: int
    latency_ms: int
    tokens: dict[str, int] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        """`tokens["total"]` when reported, else the sum of the kinds."""
        return int(_total(self.tokens))

    @property
    def total_cost(self) -> float:
        """`costs["total"]` when reported, else the sum of the kinds."""
        return float(_total(self.costs))


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """Calls, tokens and cost of one model."""

    calls: int = 0
    total_tokens: int = 0
    total_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Calls, tokens (total and by kind) and cost (total and by kind) over some reports."""

    calls: int = 0
    total_tokens: int = 0
    total_cost: float = 0.0
    tokens: dict[str, int] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """Usage of some queues since a time: totals, by model and by queue."""

    total: UsageTotals
    models: dict[str, ModelUsage]
    queues: dict[str, UsageTotals]
    since: int


@dataclass(frozen=True, slots=True)
class FlowUsage:
    """Usage summed over a flow tree: `jobs` by `"<queue>:<id>"` (the ones that reported)."""

    total: UsageTotals
    jobs: dict[str, Usage]


def _total(parts: Mapping[str, float]) -> Any:
    if "total" in parts:
        return parts["total"]
    return sum(parts.values())


def _kinds(name: str, values: object, *, integer: bool) -> dict[str, Any]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ValidationError(name, "must be a mapping of kind to amount")
    if len(values) > _MAX_KINDS:
        raise ValidationError(name, f"at most {_MAX_KINDS} kinds")
    out: dict[str, Any] = {}
    for kind, amount in values.items():
        if not isinstance(kind, str) or not kind or "|" in kind:
            raise ValidationError(name, f"kind {kind!r} must be a non-empty string without '|'")
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValidationError(name, f"{kind}: must be a number, got {amount!r}")
        if integer and (not isinstance(amount, int) or not 0 <= amount <= _MAX_INT):
            raise ValidationError(name, f"{kind}: must be an integer >= 0, got {amount!r}")
        if not math.isfinite(amount) or not 0 <= amount <= _MAX_COST:
            raise ValidationError(name, f"{kind}: must be a finite number >= 0, got {amount!r}")
        out[kind] = amount
    return out


def check_usage(
    model: object,
    provider: object,
    tokens: object,
    costs: object,
    latency_ms: object,
) -> tuple[str, str, dict[str, int], dict[str, float], int]:
    """The arguments of `report_usage`, checked; ValidationError names the bad one."""
    for name, value in (("model", model), ("provider", provider)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(name, "must be a string or None")
    lat = 0 if latency_ms is None else latency_ms
    if isinstance(lat, bool) or not isinstance(lat, int) or not 0 <= lat <= _MAX_INT:
        raise ValidationError("latency_ms", f"must be an integer >= 0, got {latency_ms!r}")
    return (
        model or "",  # type: ignore[return-value]
        provider or "",
        _kinds("tokens", tokens, integer=True),
        _kinds("costs", costs, integer=False),
        lat,
    )


@dataclass(frozen=True, slots=True)
class TokenLimiter:
    """Worker option: at most `max_tokens` tokens (as reported with `report_usage`) per fixed
    window of `duration_ms`, counted over the queue's workers that have one. A report that
    fills the window pauses the queue's fetching until the window ends: jobs wait, none is
    dropped."""

    max_tokens: int
    duration_ms: int = 60_000

    def __post_init__(self) -> None:
        for name in ("max_tokens", "duration_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= _MAX_INT:
                raise ValidationError(
                    f"token_limiter.{name}", f"must be an integer >= 1, got {v!r}"
                )
        if self.duration_ms > 315_360_000_000:
            raise ValidationError("token_limiter.duration_ms", "at most 10 years")

    @classmethod
    def coerce(cls, value: object) -> TokenLimiter:
        """A TokenLimiter, or one from a {"max_tokens", "duration_ms"} mapping."""
        if isinstance(value, TokenLimiter):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"max_tokens", "duration_ms"}
            if unknown:
                raise ValidationError("token_limiter", f"unknown keys {sorted(unknown)}")
            return cls(**value)
        raise ValidationError("token_limiter", "must be a TokenLimiter or a mapping")


def parse_usage(raw: bytes | str | None) -> Usage | None:
    """The job hash's `usage` field as a Usage (None when the job reported nothing)."""
    if not raw:
        return None
    try:
        u = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(u, dict):
        return None
    tokens = u.get("tokens")
    costs = u.get("costs")
    return Usage(
        model=u.get("model") or None,
        provider=u.get("provider") or None,
        calls=int(u.get("calls") or 0),
        latency_ms=int(u.get("latencyMs") or 0),
        tokens={k: int(v) for k, v in tokens.items()} if isinstance(tokens, dict) else {},
        costs={k: float(v) for k, v in costs.items()} if isinstance(costs, dict) else {},
    )


def merge_usage(
    old: Usage | None,
    model: str,
    provider: str,
    tokens: Mapping[str, int],
    costs: Mapping[str, float],
    latency_ms: int,
) -> Usage:
    """`old` plus one report (what the server does to the job; the testing mode's)."""
    t = dict(old.tokens) if old else {}
    c = dict(old.costs) if old else {}
    for k, n in tokens.items():
        t[k] = t.get(k, 0) + n
    for k, x in costs.items():
        c[k] = c.get(k, 0.0) + x
    return Usage(
        model=model or (old.model if old else None),
        provider=provider or (old.provider if old else None),
        calls=(old.calls if old else 0) + 1,
        latency_ms=(old.latency_ms if old else 0) + latency_ms,
        tokens=t,
        costs=c,
    )


def bucket_add(
    bucket: dict[str, float],
    model: str,
    tokens: Mapping[str, int],
    costs: Mapping[str, float],
) -> None:
    """Add one report to a per-minute bucket, field for field as the server does."""
    tok, cost = _total(tokens), float(_total(costs))
    for f, v in (("calls", 1), ("tokens", tok), ("cost", cost)):
        bucket[f] = bucket.get(f, 0) + v
    for k, n in tokens.items():
        bucket["tok|" + k] = bucket.get("tok|" + k, 0) + n
    for k, x in costs.items():
        bucket["cost|" + k] = bucket.get("cost|" + k, 0) + x
    for f, v in (("mcalls|", 1), ("mtok|", tok), ("mcost|", cost)):
        bucket[f + model] = bucket.get(f + model, 0) + v


def totals_from_fields(
    fields: Mapping[str, float],
) -> tuple[UsageTotals, dict[str, ModelUsage]]:
    """A summed bucket (field -> amount) as totals and per-model usage."""
    tokens: dict[str, int] = {}
    costs: dict[str, float] = {}
    models: dict[str, dict[str, float]] = {}
    for f, v in fields.items():
        head, sep, rest = f.partition("|")
        if not sep:
            continue
        if head == "tok":
            tokens[rest] = int(v)
        elif head == "cost":
            costs[rest] = float(v)
        elif head in ("mcalls", "mtok", "mcost"):
            models.setdefault(rest, {})[head] = v
    per_model = {
        m: ModelUsage(int(d.get("mcalls", 0)), int(d.get("mtok", 0)), float(d.get("mcost", 0.0)))
        for m, d in models.items()
    }
    totals = UsageTotals(
        calls=int(fields.get("calls", 0)),
        total_tokens=int(fields.get("tokens", 0)),
        total_cost=float(fields.get("cost", 0.0)),
        tokens=tokens,
        costs=costs,
    )
    return totals, per_model


def combine(
    parts: Sequence[tuple[UsageTotals, dict[str, ModelUsage]]],
) -> tuple[UsageTotals, dict[str, ModelUsage]]:
    """Several totals (of queues) added up."""
    tokens: dict[str, int] = {}
    costs: dict[str, float] = {}
    models: dict[str, ModelUsage] = {}
    calls = tok = 0
    cost = 0.0
    for totals, per_model in parts:
        calls += totals.calls
        tok += totals.total_tokens
        cost += totals.total_cost
        for k, n in totals.tokens.items():
            tokens[k] = tokens.get(k, 0) + n
        for k, x in totals.costs.items():
            costs[k] = costs.get(k, 0.0) + x
        for m, mu in per_model.items():
            was = models.get(m, ModelUsage())
            models[m] = ModelUsage(
                was.calls + mu.calls,
                was.total_tokens + mu.total_tokens,
                was.total_cost + mu.total_cost,
            )
    return UsageTotals(calls, tok, cost, tokens, costs), models


def sum_usages(usages: Sequence[Usage]) -> UsageTotals:
    """Job usages added up (a flow's)."""
    tokens: dict[str, int] = {}
    costs: dict[str, float] = {}
    for u in usages:
        for k, n in u.tokens.items():
            tokens[k] = tokens.get(k, 0) + n
        for k, x in u.costs.items():
            costs[k] = costs.get(k, 0.0) + x
    return UsageTotals(
        calls=sum(u.calls for u in usages),
        total_tokens=sum(u.total_tokens for u in usages),
        total_cost=sum(u.total_cost for u in usages),
        tokens=tokens,
        costs=costs,
    )


def check_since(since: object, now: int) -> int:
    """`since` (ms; None: the whole week kept) as the first epoch minute to read."""
    first = now // 60_000 - USAGE_MINUTES
    if since is None:
        return first
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise ValidationError("since", "must be a time in ms (an integer >= 0) or None")
    return max(first, since // 60_000)


def check_queues(queues: object, own: str) -> list[str]:
    """The queue names of a summary (None: the queue asked)."""
    from ..keys import validate_queue_name

    if queues is None:
        return [own]
    if isinstance(queues, str) or not isinstance(queues, Sequence) or not queues:
        raise ValidationError("queues", "must be a non-empty list of queue names")
    return list(dict.fromkeys(validate_queue_name(q) for q in queues))
