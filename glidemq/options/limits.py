"""Options that limit when jobs run: rate limits, token buckets, groups, ordering keys, LIFO.

The dataclasses here are plain values (no I/O); `JobOptions` and `WorkerOptions` use them.
Token amounts are tokens for users and millitokens on the wire (1 token = 1000), as in the
wire protocol.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import CostExceedsCapacityError, ValidationError

__all__ = [
    "MAX_GROUP_SIZE",
    "MAX_GROUP_WEIGHT",
    "MAX_KEY_BYTES",
    "PLAIN_EXT",
    "SLIDING_MAX",
    "RateLimit",
    "TokenBucket",
    "check_job_limits",
    "check_key",
    "check_positive",
    "compact_limit_args",
    "limiter_args",
    "limits_to_wire",
    "millitokens",
    "rate_guard",
]


class LimitedJob(Protocol):
    """The options of a job these limits read (`glidemq.JobOptions` has them)."""

    @property
    def ordering_key(self) -> str | None: ...
    @property
    def group_key(self) -> str | None: ...
    @property
    def group_concurrency(self) -> int | None: ...
    @property
    def group_weight(self) -> int | None: ...
    @property
    def group_rate_limit(self) -> RateLimit | None: ...
    @property
    def token_bucket(self) -> TokenBucket | None: ...
    @property
    def cost(self) -> float | None: ...
    @property
    def lifo(self) -> bool: ...
    @property
    def delay(self) -> int: ...
    @property
    def priority(self) -> int: ...


MAX_KEY_BYTES = 256
# Rate limits with max up to this keep a log of start times (a sliding window, exact); larger
# ones count fixed windows (one counter, but up to 2 * max starts across a window boundary).
SLIDING_MAX = 10_000


def rate_guard(duration: int) -> int:
    """The ms a start stays in a sliding window past `duration`: 2% of it, 1 to 20 ms. Starts
    are stamped at the fetch and run a little later on the worker; the guard absorbs that."""
    return max(1, min(20, duration // 50))


_BAD_KEY = re.compile(r"[\x00-\x1f\x7f]")
_MAX_CONCURRENCY = 1_000_000
MAX_GROUP_WEIGHT = 1000
MAX_GROUP_SIZE = 1_000_000_000
PLAIN_EXT = ("",)


def check_positive(field: str, value: object, high: int = _MAX_CONCURRENCY) -> int:
    """`value` as an integer from 1 to `high`, else ValidationError naming `field`."""
    return _positive_int(field, value, high)


def check_key(field: str, key: object) -> None:
    """A group or ordering key: a non-empty string of at most MAX_KEY_BYTES bytes, without
    control characters; else ValidationError naming `field`."""
    _check_key(field, key)


def _positive_int(field: str, value: object, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(field, f"must be an integer >= 1, got {value!r}")
    if high is not None and value > high:
        raise ValidationError(field, f"must be at most {high}, got {value}")
    return value


def _number(field: str, value: object, *, positive: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):  # type: ignore[operator]
        bound = "> 0" if positive else ">= 0"
        raise ValidationError(field, f"must be a number {bound}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def millitokens(tokens: float) -> int:
    """Tokens as the wire's integer millitokens (1 token = 1000)."""
    return round(tokens * 1000)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `max` jobs start in any window of `duration` ms (a sliding window), for
    `max <= SLIDING_MAX`; above that, per fixed window of `duration` ms."""

    max: int
    duration: int

    def __post_init__(self) -> None:
        _positive_int("max", self.max)
        _positive_int("duration", self.duration)

    @classmethod
    def coerce(cls, field: str, value: RateLimit | Mapping[str, Any]) -> RateLimit:
        """A RateLimit from itself or a `{"max", "duration"}` mapping; errors name `field`."""
        if isinstance(value, RateLimit):
            return value
        if not isinstance(value, Mapping):
            raise ValidationError(field, f"must be RateLimit(max, duration), got {value!r}")
        unknown = set(value) - {"max", "duration"}
        if unknown or not {"max", "duration"} <= set(value):
            raise ValidationError(field, f"needs exactly 'max' and 'duration', got {sorted(value)}")
        try:
            return cls(value["max"], value["duration"])
        except ValidationError as exc:
            raise ValidationError(f"{field}.{exc.field}", exc.reason) from None


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """A bucket of `capacity` tokens, refilled at `refill_rate` tokens per second. A job takes
    its `cost` in tokens to start (1 by default) and waits until the bucket holds that many."""

    capacity: float
    refill_rate: float

    def __post_init__(self) -> None:
        _number("token_bucket.capacity", self.capacity, positive=True)
        _number("token_bucket.refill_rate", self.refill_rate, positive=True)
        if millitokens(self.capacity) < 1 or millitokens(self.refill_rate) < 1:
            raise ValidationError("token_bucket", "capacity and refill_rate must be >= 0.001")


def _check_key(field: str, key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ValidationError(field, "must be a non-empty string")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValidationError(field, f"longer than {MAX_KEY_BYTES} bytes")
    if _BAD_KEY.search(key):
        raise ValidationError(field, f"{key!r} contains control characters")


def check_job_limits(o: LimitedJob) -> None:
    """Validate the limit options of a job (called by JobOptions on construction)."""
    key = _check_keys(o)
    for name, value in (
        ("group_concurrency", o.group_concurrency),
        ("group_weight", o.group_weight),
        ("group_rate_limit", o.group_rate_limit),
        ("token_bucket", o.token_bucket),
    ):
        if value is not None and key is None:
            raise ValidationError(name, "needs group_key or ordering_key")
    if o.group_rate_limit is not None and not isinstance(o.group_rate_limit, RateLimit):
        raise ValidationError("group_rate_limit", "must be RateLimit(max, duration)")
    _check_tokens(o)
    _check_lifo(o, key)


def _check_keys(o: LimitedJob) -> str | None:
    """The job's ordering or group key (at most one of them), checked with its concurrency."""
    if o.ordering_key is not None:
        _check_key("ordering_key", o.ordering_key)
        if o.group_key is not None:
            raise ValidationError("group_key", "set either ordering_key or group_key, not both")
        if o.group_concurrency not in (None, 1):
            raise ValidationError(
                "group_concurrency", "an ordering key runs one job at a time; use group_key"
            )
    elif o.group_key is not None:
        _check_key("group_key", o.group_key)
    if o.group_concurrency is not None:
        _positive_int("group_concurrency", o.group_concurrency, _MAX_CONCURRENCY)
    if o.group_weight is not None:
        _positive_int("group_weight", o.group_weight, MAX_GROUP_WEIGHT)
        if o.ordering_key is not None or o.group_concurrency == 1:
            raise ValidationError(
                "group_weight",
                "applies to groups that run jobs side by side (an ordering key, or "
                "group_concurrency=1, already takes one job per turn)",
            )
    return o.ordering_key if o.ordering_key is not None else o.group_key


def _check_tokens(o: LimitedJob) -> None:
    """The token bucket and the job's cost in it."""
    if o.token_bucket is not None and not isinstance(o.token_bucket, TokenBucket):
        raise ValidationError("token_bucket", "must be TokenBucket(capacity, refill_rate)")
    if o.cost is not None:
        _number("cost", o.cost, positive=True)
        if o.token_bucket is None:
            raise ValidationError("cost", "needs token_bucket (the bucket the cost is paid from)")
        if millitokens(o.cost) < 1:
            raise ValidationError("cost", "must be >= 0.001")
    if o.token_bucket is not None:
        cost = o.cost if o.cost is not None else 1.0
        if millitokens(cost) > millitokens(o.token_bucket.capacity):
            raise CostExceedsCapacityError(cost, o.token_bucket.capacity)


def _check_lifo(o: LimitedJob, key: str | None) -> None:
    if not isinstance(o.lifo, bool):
        raise ValidationError("lifo", f"must be a bool, got {o.lifo!r}")
    if o.lifo:
        if key is not None:
            raise ValidationError("lifo", "cannot be combined with ordering_key or group_key")
        if o.delay or o.priority:
            raise ValidationError("lifo", "applies to jobs without delay and priority")


def limits_to_wire(o: LimitedJob, out: dict[str, Any]) -> None:
    """Add the limit options to a job's `opts` JSON. The server reads the addJob arguments
    for them, and `groupWeight` from here (the argument list has no place for it)."""
    if o.ordering_key is not None:
        out["orderingKey"] = o.ordering_key
    if o.group_key is not None:
        out["groupKey"] = o.group_key
    if o.group_concurrency is not None:
        out["groupConcurrency"] = o.group_concurrency
    if o.group_weight is not None:
        out["groupWeight"] = o.group_weight  # read by the server: the group is fair
    if o.group_rate_limit is not None:
        r = o.group_rate_limit
        out["groupRateLimit"] = {"max": r.max, "duration": r.duration}
    if o.token_bucket is not None:
        b = o.token_bucket
        out["tokenBucket"] = {"capacity": b.capacity, "refillRate": b.refill_rate}
    if o.cost is not None:
        out["cost"] = o.cost
    if o.lifo:
        out["lifo"] = True


def compact_limit_args(o: LimitedJob) -> tuple[str, ...]:
    """The tail of a job in `wire.adds.add_bulk_call`: ('',) for a plain job, else '1' and the eight
    extension arguments (addJob's 9-15 and the LIFO flag)."""
    key = o.ordering_key if o.ordering_key is not None else o.group_key
    if key is None and not o.lifo:
        return PLAIN_EXT
    return ("1", *addjob_limit_args(o))


def addjob_limit_args(o: LimitedJob) -> tuple[str, ...]:
    """addJob's arguments 9-15 (orderingKey .. jobCost) and the 18th (lifo) for a job."""
    key = o.ordering_key if o.ordering_key is not None else o.group_key
    if key is None:
        return ("", "0", "0", "0", "0", "0", "0", "1" if o.lifo else "")
    rate, bucket = o.group_rate_limit, o.token_bucket
    return (
        key,
        _concurrency_arg(o),
        str(rate.max) if rate else "0",
        str(rate.duration) if rate else "0",
        str(millitokens(bucket.capacity)) if bucket else "0",
        str(millitokens(bucket.refill_rate)) if bucket else "0",
        str(millitokens(o.cost)) if o.cost is not None else "0",
        "",
    )


def _concurrency_arg(o: LimitedJob) -> str:
    """addJob's groupConcurrency: '0' for an ordering key, and for a fair group without a
    concurrency (no limit); else the group's concurrency (1 by default)."""
    if o.ordering_key is not None or (o.group_weight is not None and o.group_concurrency is None):
        return "0"
    return str(o.group_concurrency or 1)


class LimitedWorker(Protocol):
    """The worker option the limiter arguments read (`glidemq.WorkerOptions` has it)."""

    @property
    def limiter(self) -> RateLimit | None: ...


def limiter_args(opts: LimitedWorker) -> list[str]:
    """The worker limiter as the fetch functions take it: max, duration ('0' '0': none)."""
    if opts.limiter is None:
        return ["0", "0"]
    return [str(opts.limiter.max), str(opts.limiter.duration)]
