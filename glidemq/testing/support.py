"""What the in-memory queues support, and the typed refusal of everything else.

An option or method the real engine has and the in-memory one does not is refused with
UnsupportedOptionError naming it, never silently ignored.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import MISSING, fields
from typing import Any

from ..errors import UnsupportedOptionError
from ..types import JobOptions, WorkerOptions

__all__ = [
    "SUPPORTED_JOB_OPTIONS",
    "SUPPORTED_WORKER_OPTIONS",
    "UNSUPPORTED_JOB_METHODS",
    "UNSUPPORTED_QUEUE_METHODS",
    "UNSUPPORTED_WORKER_METHODS",
    "check_options",
    "install_unsupported",
    "unsupported",
]

SUPPORTED_JOB_OPTIONS = frozenset(
    {
        "fallbacks",
        "delay",
        "priority",
        "attempts",
        "backoff",
        "timeout",
        "remove_on_complete",
        "remove_on_fail",
        "deduplication",
        "job_id",
        "ttl",
        "ordering_key",
        "group_key",
        "group_concurrency",
        "group_rate_limit",
        "token_bucket",
        "cost",
        "lifo",
        "ignore_dependency_on_failure",
        "remove_dependency_on_failure",
        "continue_parent_on_failure",
        "result_ttl",
    }
)

# Timing knobs of the real worker (blocking reads, promotion passes, heartbeats, stall
# scans) are accepted: in memory nothing waits on a server, so they change no outcome.
SUPPORTED_WORKER_OPTIONS = frozenset(
    {
        "concurrency",
        "prefetch",
        "block_timeout",
        "lock_duration",
        "stalled_interval",
        "max_stalled_count",
        "promotion_interval",
        "remove_on_complete",
        "remove_on_fail",
        "dead_letter",
        "events",
        "backoff_strategies",
        "close_timeout",
        "consumer",
        "batch",
        "limiter",
        "token_limiter",
        "max_result_bytes",
        "serializer",
    }
)

# Public methods of Queue / Worker / Job the in-memory classes do not emulate: each exists
# with the real signature and raises UnsupportedOptionError naming itself when called.
UNSUPPORTED_QUEUE_METHODS: frozenset[str] = frozenset()
UNSUPPORTED_WORKER_METHODS: frozenset[str] = frozenset()
UNSUPPORTED_JOB_METHODS: frozenset[str] = frozenset()


def unsupported(feature: str) -> UnsupportedOptionError:
    """The error for a feature glidemq.testing does not emulate."""
    return UnsupportedOptionError(
        feature, "not supported by glidemq.testing; test this against a real Valkey"
    )


def _default(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def check_options(options: JobOptions | WorkerOptions) -> None:
    """Raise UnsupportedOptionError for a field set to anything but its default that the
    in-memory engine does not emulate (options added to the real engine later included)."""
    if isinstance(options, JobOptions):
        supported = SUPPORTED_JOB_OPTIONS
    else:
        supported = SUPPORTED_WORKER_OPTIONS
        if options.sandbox is not None:
            raise unsupported("sandbox")
    for f in fields(options):
        if f.name in supported or f.name == "sandbox":
            continue
        if getattr(options, f.name) != _default(f):
            raise unsupported(f.name)


def _stub(real_cls: type[Any], name: str) -> Callable[..., Any]:
    real = getattr(real_cls, name)
    feature = f"{real_cls.__name__}.{name}"

    async def refuse_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise unsupported(feature)

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise unsupported(feature)

    method = refuse_async if inspect.iscoroutinefunction(real) else refuse
    functools.update_wrapper(method, real)
    method.__doc__ = f"Not emulated in memory: raises UnsupportedOptionError ({feature})."
    return method


def install_unsupported(cls: type[Any], real_cls: type[Any], names: Iterable[str]) -> None:
    """Give `cls` a method for each of `names` of `real_cls` that refuses to run."""
    for name in names:
        if hasattr(real_cls, name) and name not in cls.__dict__:
            setattr(cls, name, _stub(real_cls, name))
