"""Typed options: jobs, retention, backoff, deduplication, workers.

Every options class validates itself on construction and raises `ValidationError` naming
the bad field; `from_mapping` builds one from a dict and rejects unknown keys.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal, TypeAlias, TypeVar

import orjson

from .encoding.serializers import get_serializer
from .errors import ValidationError
from .keys import validate_job_id
from .options import foreign
from .options.checks import check_int as _int
from .options.fallbacks import Fallback, check_fallbacks
from .options.limits import RateLimit, TokenBucket, check_job_limits, limits_to_wire
from .options.sandbox import SandboxOptions
from .options.usage import TokenLimiter

__all__ = [
    "MAX_DELAY",
    "MAX_PRIORITY",
    "Backoff",
    "BackoffStrategy",
    "BatchOptions",
    "Deduplication",
    "JobOptions",
    "KeepJobs",
    "Retention",
    "WorkerOptions",
    "bulk_item",
    "from_mapping",
]

MAX_PRIORITY = 2047
"""Highest priority number: the scheduled set's score (priority * 2^42 + offset) stays exact."""
MAX_DELAY = 10 * 365 * 86_400_000
"""Longest delay in ms (10 years of 365 days); the library refuses longer ones too."""

T = TypeVar("T")


def from_mapping(cls: type[T], values: Mapping[str, Any]) -> T:
    """Build options of type `cls` from a mapping; an unknown key is an error, not ignored."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    for key in values:
        if key not in known:
            if key in foreign.OPTIONS:  # a Celery word: say glidemq's, never guess a near name
                raise ValidationError(key, f"not a glidemq option: {foreign.OPTIONS[key]}")
            hint = difflib.get_close_matches(key, known, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValidationError(key, f"unknown option for {cls.__name__}{extra}")
    return cls(**values)


@dataclass(frozen=True, slots=True)
class KeepJobs:
    """Keep at most `count` finished jobs and none older than `age` seconds (None: no limit)."""

    count: int | None = None
    age: int | None = None

    def __post_init__(self) -> None:
        if self.count is not None:
            _int("count", self.count)
        if self.age is not None:
            _int("age", self.age, low=1)


Retention: TypeAlias = bool | int | KeepJobs
"""True removes a finished job at once, False keeps all, N keeps the newest N."""


def retention_args(value: Retention) -> tuple[int, int]:
    """(keepCount, keepAge) as the server functions take them: -1 keeps all, 0 keeps none."""
    if value is True:
        return 0, 0
    if value is False:
        return -1, 0
    if isinstance(value, int):
        return _int("remove_on_complete", value), 0
    return (-1 if value.count is None else value.count), (value.age or 0)


def job_retention(
    job_opts: Mapping[str, Any], key: str, default: tuple[int, int]
) -> tuple[int, int]:
    """The (keepCount, keepAge) for one job: its own removeOnComplete / removeOnFail wire
    option when it has a usable one, else the worker's `default`."""
    if key in job_opts:
        wire = retention_from_wire(job_opts[key])
        if wire is not None:
            return retention_args(wire)
    return default


def _check_retention(name: str, value: object) -> None:
    if value is None or isinstance(value, bool | KeepJobs):
        return
    if isinstance(value, int):
        _int(name, value)
        return
    raise ValidationError(name, f"must be a bool, a count or KeepJobs, got {value!r}")


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before a retry: `fixed`, `exponential`, or a named custom strategy."""

    type: str = "fixed"
    delay: int = 1000
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise ValidationError("backoff.type", "must be a non-empty string")
        _int("backoff.delay", self.delay)
        if not isinstance(self.jitter, int | float) or not 0.0 <= self.jitter <= 1.0:
            raise ValidationError("backoff.jitter", f"must be within 0..1, got {self.jitter!r}")


BackoffStrategy: TypeAlias = Callable[[int, BaseException], int]
"""A custom backoff: (attempts made, error) -> delay in ms; negative means do not retry."""


@dataclass(frozen=True, slots=True)
class Deduplication:
    """Skip or replace a job whose deduplication id is already in use (see the wire protocol)."""

    id: str
    ttl: int = 0
    mode: Literal["simple", "throttle", "debounce"] = "simple"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValidationError("deduplication.id", "must be a non-empty string")
        _int("deduplication.ttl", self.ttl)
        if self.mode not in ("simple", "throttle", "debounce"):
            raise ValidationError("deduplication.mode", f"unknown mode {self.mode!r}")
        if self.mode == "throttle" and self.ttl <= 0:
            raise ValidationError("deduplication.ttl", "throttle mode needs a ttl > 0")


_DEPENDENCY_POLICIES = (
    "ignore_dependency_on_failure",
    "remove_dependency_on_failure",
    "continue_parent_on_failure",
)


def _check_dependency_policy(opts: JobOptions) -> None:
    """A flow child's failure policy: at most one of the options (docs/WORKFLOWS.md)."""
    chosen = []
    for name in _DEPENDENCY_POLICIES:
        if not isinstance(getattr(opts, name), bool):
            raise ValidationError(name, "must be a bool")
        if getattr(opts, name):
            chosen.append(name)
    if len(chosen) > 1:
        raise ValidationError(chosen[1], f"cannot be combined with {chosen[0]}")


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Options of one job. Times are in milliseconds.

    attempts counts every try, the first included; `timeout` fails a try that runs longer;
    `ttl` fails a job that has not started within that time; `job_id` makes adding idempotent;
    `result_ttl` keeps the job's outcome readable for that long after it finished, whatever
    its retention (0: not at all, None: the Queue's default). In a flow, a child that fails
    for good fails its parents unless `ignore_dependency_on_failure`,
    `remove_dependency_on_failure` or `continue_parent_on_failure` (run the parents at once,
    the failure recorded) is set (docs/WORKFLOWS.md).
    Jobs with one `ordering_key` run one at a time in the order they were added; jobs with one
    `group_key` run at most `group_concurrency` at a time (default 1, which is an ordering
    key). A `group_weight` makes a group fair: fair groups take turns, `group_weight` jobs
    each per turn, and its `group_concurrency` defaults to no limit. Both kinds may add a
    `group_rate_limit` and a `token_bucket` that each job takes `cost` tokens from; `lifo`
    jobs run newest first (docs/ADVANCED.md). `fallbacks` lists models to try after a failed
    try (`job.current_fallback`); `attempts` is at least one more than its length (docs/AI.md).
    `lock_duration` gives the job a lock of its own: stall recovery leaves it alone until it
    has been silent that long, even past the worker's `lock_duration`. An `at_most_once` job
    whose run is interrupted (worker died, stalled, or closed) is never run again: it goes to
    the dead-letter set with reason 'interrupted'. `workflow` marks a durable workflow's job
    (set by `@glidemq.workflow`, docs/DURABLE.md): signals sent to it before it waits for
    them are kept in its mailbox instead of refused.
    """

    delay: int = 0
    priority: int = 0
    attempts: int = 1
    backoff: Backoff | None = None
    timeout: int | None = None
    remove_on_complete: Retention | None = None
    remove_on_fail: Retention | None = None
    deduplication: Deduplication | None = None
    ignore_dependency_on_failure: bool = False
    remove_dependency_on_failure: bool = False
    continue_parent_on_failure: bool = False
    job_id: str | None = None
    ttl: int = 0
    result_ttl: int | None = None
    ordering_key: str | None = None
    group_key: str | None = None
    group_concurrency: int | None = None
    group_weight: int | None = None
    group_rate_limit: RateLimit | None = None
    token_bucket: TokenBucket | None = None
    cost: float | None = None
    lifo: bool = False
    fallbacks: tuple[Fallback, ...] | None = None
    lock_duration: int | None = None
    at_most_once: bool = False
    workflow: bool = False

    def __post_init__(self) -> None:
        _int("delay", self.delay, high=MAX_DELAY)
        if self.lock_duration is not None:
            _int("lock_duration", self.lock_duration, low=100)
        if not isinstance(self.at_most_once, bool):
            raise ValidationError("at_most_once", f"must be a bool, got {self.at_most_once!r}")
        if not isinstance(self.workflow, bool):
            raise ValidationError("workflow", f"must be a bool, got {self.workflow!r}")
        _int("priority", self.priority, high=MAX_PRIORITY)
        _int("attempts", self.attempts, low=1)
        chain = check_fallbacks(self.fallbacks)
        object.__setattr__(self, "fallbacks", chain)  # frozen: normalized once, here
        if chain and self.attempts < len(chain) + 1:
            object.__setattr__(self, "attempts", len(chain) + 1)
        _int("ttl", self.ttl)
        if self.result_ttl is not None:
            _int("result_ttl", self.result_ttl)
        if self.timeout is not None:
            _int("timeout", self.timeout, low=1)
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise ValidationError("backoff", "must be a Backoff")
        if self.deduplication is not None and not isinstance(self.deduplication, Deduplication):
            raise ValidationError("deduplication", "must be a Deduplication")
        _check_retention("remove_on_complete", self.remove_on_complete)
        _check_retention("remove_on_fail", self.remove_on_fail)
        if self.job_id is not None:
            validate_job_id(self.job_id)
        _check_dependency_policy(self)
        check_job_limits(self)

    @classmethod
    def coerce(cls, value: JobOptions | Mapping[str, Any] | None) -> JobOptions:
        """Options from options, a dict of the same names (nested dicts allowed), or None."""
        if value is None:
            return _DEFAULT_JOB_OPTIONS
        if isinstance(value, JobOptions):
            return value
        if not isinstance(value, Mapping):
            raise ValidationError("opts", f"expected JobOptions or a dict, got {value!r}")
        try:
            # the value's type is part of the key: True == 1 but means another thing here
            return _coerce_cached(tuple([(k, v.__class__, v) for k, v in value.items()]))
        except TypeError:  # unhashable values (nested dicts): build it each time
            pass
        values = dict(value)
        nested: tuple[tuple[str, type[Any]], ...] = (
            ("backoff", Backoff),
            ("deduplication", Deduplication),
            ("remove_on_complete", KeepJobs),
            ("remove_on_fail", KeepJobs),
            ("group_rate_limit", RateLimit),
            ("token_bucket", TokenBucket),
        )
        for key, kind in nested:
            if isinstance(values.get(key), Mapping):
                try:
                    values[key] = from_mapping(kind, values[key])
                except ValidationError as exc:
                    if exc.field.startswith(f"{key}."):
                        raise
                    # name the nested field in full: "backoff.typ", "remove_on_fail.count"
                    raise ValidationError(f"{key}.{exc.field}", exc.reason) from None
        return from_mapping(cls, values)

    def to_wire(self) -> dict[str, Any]:
        """The `opts` JSON stored in the job hash, in the protocol's camelCase names: every
        option that is set (`_WIRE_FIELDS`), then the limit options."""
        out: dict[str, Any] = {}
        for name, key, is_set, encode in _WIRE_FIELDS:
            value = getattr(self, name)
            if is_set(value):
                out[key] = encode(value)
        limits_to_wire(self, out)
        return out


def _given(value: Any) -> bool:
    return value is not None


def _as_is(value: Any) -> Any:
    return value


def _true(value: Any) -> bool:
    return True


def _backoff_wire(b: Backoff) -> dict[str, Any]:
    out: dict[str, Any] = {"type": b.type, "delay": b.delay}
    if b.jitter:
        out["jitter"] = b.jitter
    return out


def _retention_wire(value: Retention) -> Any:
    if isinstance(value, KeepJobs):
        pairs = (("count", value.count), ("age", value.age))
        return {k: v for k, v in pairs if v is not None}  # count 0 = keep none
    return value


def _dedup_wire(d: Deduplication) -> dict[str, Any]:
    return {"id": d.id, "ttl": d.ttl, "mode": d.mode}


def _fallbacks_wire(chain: tuple[Fallback, ...]) -> list[dict[str, Any]]:
    return [f.to_wire() for f in chain]


# JobOptions field -> (its name in the stored opts, whether it is set, its wire form); in the
# order the opts JSON has always had. The limit options follow (limit_options.limits_to_wire).
_WIRE_FIELDS: tuple[tuple[str, str, Callable[[Any], bool], Callable[[Any], Any]], ...] = (
    ("delay", "delay", bool, _as_is),
    ("priority", "priority", bool, _as_is),
    ("attempts", "attempts", lambda v: v != 1, _as_is),
    ("backoff", "backoff", _given, _backoff_wire),
    ("timeout", "timeout", _given, _as_is),
    ("remove_on_complete", "removeOnComplete", _given, _retention_wire),
    ("remove_on_fail", "removeOnFail", _given, _retention_wire),
    ("deduplication", "deduplication", _given, _dedup_wire),
    ("ignore_dependency_on_failure", "ignoreDependencyOnFailure", bool, _true),
    ("remove_dependency_on_failure", "removeDependencyOnFailure", bool, _true),
    ("continue_parent_on_failure", "continueParentOnFailure", bool, _true),
    ("job_id", "jobId", _given, _as_is),
    ("ttl", "ttl", bool, _as_is),
    ("result_ttl", "resultTtl", bool, _as_is),
    ("fallbacks", "fallbacks", bool, _fallbacks_wire),
    ("lock_duration", "lockDuration", _given, _as_is),
    ("at_most_once", "atMostOnce", bool, _true),
    ("workflow", "workflow", bool, _true),
)


_DEFAULT_JOB_OPTIONS = JobOptions()


@functools.lru_cache(maxsize=256)
def _coerce_cached(items: tuple[tuple[str, type, Any], ...]) -> JobOptions:
    return from_mapping(JobOptions, {k: v for k, _, v in items})


OptionsKey = tuple[JobOptions, type, type]


def options_key(opts: JobOptions) -> OptionsKey:
    """A cache key for `opts` that tells retention values apart by type: True == 1 and
    False == 0 for equality and hashing, but remove_on_fail=True drops a failed job at once
    and =1 keeps the newest one; False keeps every job and 0 none."""
    return opts, type(opts.remove_on_complete), type(opts.remove_on_fail)


def wire_opts(opts: JobOptions) -> bytes:
    """The job's `opts` JSON, cached: most jobs of a program share a few option sets."""
    return _wire_opts(options_key(opts))


@functools.lru_cache(maxsize=256)
def _wire_opts(key: OptionsKey) -> bytes:
    return orjson.dumps(key[0].to_wire())


def retention_from_wire(value: Any) -> Retention | None:
    """Parse a removeOnComplete / removeOnFail value written by any producer; None if absent."""
    if value is None or isinstance(value, bool):
        return bool(value) if value is not None else None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, Mapping):
        count, age = value.get("count"), value.get("age")
        return KeepJobs(
            count=count if isinstance(count, int) and count >= 0 else None,
            age=age if isinstance(age, int) and age > 0 else None,
        )
    return None


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """Batch mode: the processor receives up to `size` jobs at once and returns one result
    per job. A batch starts as soon as it holds `min_size` jobs (default: `size`), or with
    what it has once its first job waited `timeout_ms`. With `group`, each batch holds jobs
    of one group only (`group_key`; jobs without one are batched together)."""

    size: int = 10
    timeout_ms: int = 50
    min_size: int | None = None
    group: bool = False

    def __post_init__(self) -> None:
        _int("batch.size", self.size, low=1, high=10_000)
        _int("batch.timeout_ms", self.timeout_ms)
        if self.min_size is not None:
            _int("batch.min_size", self.min_size, low=1, high=self.size)
        if not isinstance(self.group, bool):
            raise ValidationError("batch.group", f"must be a bool, got {self.group!r}")


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """Settings of a Worker. Times are in milliseconds.

    concurrency: jobs run at once by this worker; prefetch: most jobs taken per fetch (default:
    concurrency); lock_duration: a running job whose worker stops heart-beating for this long
    is reclaimed by another worker; stalled_interval: how often to look for such jobs;
    max_stalled_count: reclaims before the job fails; events: write per-job lifecycle events;
    dead_letter: park jobs that fail for good in the queue's dead-letter set; sandbox: run
    the processor (then a 'module:attr' or file target) in child processes (docs/SANDBOX.md);
    limiter: at most `max` jobs start per `duration` ms, counted over all workers of the queue;
    max_result_bytes: largest serialized return value stored (bytes); a larger one fails the try.
    serializer: how results are encoded, `"json"` or `"msgpack"`: must be the queue's.
    hold_window: jobs taken beyond `concurrency` while others run, so the next one starts
    without a round trip: about this many ms of work at the recent run time (0: none;
    docs/USAGE.md "Held jobs"); max_held: the most jobs held at once (default: concurrency,
    at least 256). Neither applies with `sandbox` (it queues runs in its children), `batch`,
    `limiter` or `token_limiter`.
    """

    concurrency: int = 1
    prefetch: int | None = None
    block_timeout: int = 5000
    lock_duration: int = 30_000
    stalled_interval: int = 30_000
    max_stalled_count: int = 1
    promotion_interval: int = 500
    remove_on_complete: Retention = False
    remove_on_fail: Retention = False
    dead_letter: bool = False
    events: bool = True
    backoff_strategies: Mapping[str, BackoffStrategy] = field(default_factory=dict)
    close_timeout: float = 30.0
    consumer: str | None = None
    batch: BatchOptions | None = None
    sandbox: SandboxOptions | None = None
    limiter: RateLimit | None = None
    max_result_bytes: int = 1_048_576
    serializer: str = "json"
    token_limiter: TokenLimiter | None = None
    hold_window: int = 20
    max_held: int | None = None

    def __post_init__(self) -> None:
        if self.limiter is not None:  # a {"max", "duration"} dict is fine too
            object.__setattr__(self, "limiter", RateLimit.coerce("limiter", self.limiter))
        if self.token_limiter is not None:
            object.__setattr__(self, "token_limiter", TokenLimiter.coerce(self.token_limiter))
        _int("concurrency", self.concurrency, low=1, high=100_000)
        if self.prefetch is not None:
            _int("prefetch", self.prefetch, low=1, high=100_000)
        _int("block_timeout", self.block_timeout, low=1)
        _int("hold_window", self.hold_window, high=60_000)
        if self.max_held is not None:
            _int("max_held", self.max_held, high=100_000)
        _int("lock_duration", self.lock_duration, low=100)
        _int("stalled_interval", self.stalled_interval, low=50)
        _int("max_stalled_count", self.max_stalled_count)
        _int("promotion_interval", self.promotion_interval, low=10)
        _int("max_result_bytes", self.max_result_bytes, low=1)
        if self.consumer is not None and (
            not isinstance(self.consumer, str) or self.consumer.endswith(":wake")
        ):
            # "<name>:wake" is where the worker named <name> takes delivery of a blocking read
            raise ValidationError("consumer", "must be a string not ending in ':wake'")
        _check_retention("remove_on_complete", self.remove_on_complete)
        _check_retention("remove_on_fail", self.remove_on_fail)
        if not isinstance(self.close_timeout, int | float) or self.close_timeout < 0:
            raise ValidationError("close_timeout", "must be a number of seconds >= 0")
        for name, fn in self.backoff_strategies.items():
            if not callable(fn):
                raise ValidationError(f"backoff_strategies.{name}", "must be callable")
        if self.batch is not None and not isinstance(self.batch, BatchOptions):
            raise ValidationError("batch", "must be BatchOptions(size, timeout_ms)")
        if self.sandbox is not None and not isinstance(self.sandbox, SandboxOptions):
            raise ValidationError("sandbox", "must be SandboxOptions(...)")
        if self.serializer != "json":
            get_serializer(self.serializer)  # unknown names, msgpack not installed
            if self.sandbox is not None:
                raise ValidationError("serializer", "sandboxed processors return JSON only")


def worker_options(options: WorkerOptions | None, settings: Mapping[str, Any]) -> WorkerOptions:
    """A worker's options: `options` (default: all defaults) with the keyword `settings`
    applied; an unknown name is rejected with a hint, an invalid value as usual."""
    base = options or WorkerOptions()
    if settings:
        from_mapping(WorkerOptions, settings)  # rejects unknown names with a hint
        base = replace(base, **settings)
    return base


def field_defaults(cls: type[Any]) -> dict[str, Any]:
    """Default value of every field of an options class (for help texts and docs)."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def bulk_item(index: int, item: Any) -> tuple[Any, Any, Any]:
    """(name, data, raw opts) of one `add_bulk` item: `{"name", "data", "opts"}` or
    `(name, data[, opts])`; anything else, or unknown keys, is a ValidationError."""
    if isinstance(item, Mapping):
        unknown = set(item) - {"name", "data", "opts"}
        if unknown:
            raise ValidationError(f"jobs[{index}]", f"unknown keys {sorted(unknown)}")
        return item.get("name"), item.get("data"), item.get("opts")
    if isinstance(item, tuple) and len(item) in (2, 3):
        return item[0], item[1], item[2] if len(item) == 3 else None
    raise ValidationError(f"jobs[{index}]", "expected a mapping or (name, data[, opts])")
