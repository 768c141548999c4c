"""SandboxOptions: how a Worker runs its processor in child processes (a value; the pool
itself is glidemq.sandbox)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ValidationError
from .checks import check_int as _int

__all__ = ["DEFAULT_ATTR", "SandboxOptions", "normalize_target", "processor_target"]

DEFAULT_ATTR = "process"
"""The attribute a processor file given without `:attr` must define: `path/to/file.py`
means `path/to/file.py:process`."""


def _seconds(name: str, value: object, *, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise ValidationError(name, f"must be a number of seconds >= {low:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class SandboxOptions:
    """Run the processor in a pool of child processes (see docs/SANDBOX.md).

    max_children: child processes (default: the Worker's concurrency, in batches for batch
    mode: one job per child). child_concurrency: jobs one child runs at once; only async
    processors can run more than one (default: concurrency / max_children, rounded up). An
    async processor with fewer children than the concurrency (say one per core) is much
    faster, but a crash or a timeout then fails every job its child was running.
    pipeline: the most runs each child holds queued behind the ones it runs, so it starts
    its next job without waiting for the worker (0: none; not used in batch mode). How many
    it holds is a time budget: about `pipeline_window` of work at the recent run time (all
    of them for jobs of well under a millisecond, a few for jobs of a few ms, none for jobs
    longer than the window); the Worker takes that many jobs beyond its concurrency. A
    queued run has not started: its timeout counts from its start, and a crash or a timeout
    sends it to another child without using an attempt. pipeline_window: seconds; runs
    queue only behind a child that started a run this recently, and a child that starts
    none for this long (a long job runs there) gives its queued runs back: they go to a free
    child, or, when every child is busy with a long job, back to the queue (no attempt
    used), so another worker may run them.
    start_method: `forkserver` (default: one clean fork server per pool, which has imported
    glidemq, forks each child in a few ms) or `spawn` (a fresh interpreter per child, about
    0.4 s each). preload: the fork server also imports the processor's module, so children
    start with it imported. timeout: a default per-job timeout in ms for jobs without their
    own. max_jobs_per_child: recycle a child after this many jobs. max_memory_per_child_mb:
    recycle a child whose RSS is above this after a job. memory_hard_limit_mb: address-space
    cap (RLIMIT_AS) above the child's size at start; default twice max_memory_per_child_mb,
    0 for none. kill_grace: seconds between SIGTERM and SIGKILL. abort_grace: seconds a
    child gets to stop an aborted job before it is killed. boot_timeout: seconds a child may
    take to import the processor. max_boot_backoff: longest wait between attempts to start a
    child while none can start. heartbeat_interval: seconds between a child's heartbeats.
    """

    max_children: int | None = None
    child_concurrency: int | None = None
    pipeline: int = 16
    pipeline_window: float = 0.02
    start_method: Literal["forkserver", "spawn"] = "forkserver"
    preload: bool = False
    timeout: int | None = None
    max_jobs_per_child: int | None = None
    max_memory_per_child_mb: int | None = None
    memory_hard_limit_mb: int | None = None
    kill_grace: float = 0.5
    abort_grace: float = 2.0
    boot_timeout: float = 30.0
    max_boot_backoff: float = 30.0
    heartbeat_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.max_children is not None:
            _int("sandbox.max_children", self.max_children, low=1, high=1024)
        if self.child_concurrency is not None:
            _int("sandbox.child_concurrency", self.child_concurrency, low=1, high=100_000)
        _int("sandbox.pipeline", self.pipeline, low=0, high=64)
        _seconds("sandbox.pipeline_window", self.pipeline_window, low=0.001)
        if self.start_method not in ("forkserver", "spawn"):
            raise ValidationError(
                "sandbox.start_method",
                f"must be 'forkserver' or 'spawn', got {self.start_method!r} (fork is not "
                "offered: a fork of a process with Valkey client threads is not safe)",
            )
        if not isinstance(self.preload, bool):
            raise ValidationError("sandbox.preload", "must be a bool")
        if self.timeout is not None:
            _int("sandbox.timeout", self.timeout, low=1)
        if self.max_jobs_per_child is not None:
            _int("sandbox.max_jobs_per_child", self.max_jobs_per_child, low=1)
        if self.max_memory_per_child_mb is not None:
            _int("sandbox.max_memory_per_child_mb", self.max_memory_per_child_mb, low=1)
        if self.memory_hard_limit_mb is not None:
            _int("sandbox.memory_hard_limit_mb", self.memory_hard_limit_mb)
        _seconds("sandbox.kill_grace", self.kill_grace)
        _seconds("sandbox.abort_grace", self.abort_grace)
        _seconds("sandbox.boot_timeout", self.boot_timeout, low=0.1)
        _seconds("sandbox.max_boot_backoff", self.max_boot_backoff, low=0.1)
        _seconds("sandbox.heartbeat_interval", self.heartbeat_interval, low=0.05)

    @property
    def hard_limit_bytes(self) -> int | None:
        """The RLIMIT_AS margin in bytes above the child's size at start, or None."""
        if self.memory_hard_limit_mb is not None:
            return self.memory_hard_limit_mb << 20 or None
        if self.max_memory_per_child_mb is not None:
            return (2 * self.max_memory_per_child_mb) << 20
        return None


def normalize_target(target: str) -> str:
    """Check a processor target's form and make file paths absolute.

    Accepted: `package.module:attr` (attr may be dotted), `package.module` alone (its
    `@glidemq.task` functions), `path/to/file.py:attr`, and `path/to/file.py` alone,
    meaning attribute `process` (DEFAULT_ATTR). Whether it imports
    is checked in the child, which owns user code.
    """
    if not isinstance(target, str) or not target.strip():
        raise ValidationError("processor", f"expected 'module:attr' or a file path, got {target!r}")
    if target.endswith(":"):
        raise ValidationError("processor", f"malformed processor target {target!r}: no attribute")
    module, sep, attr = target.rpartition(":")
    if not sep or os.sep in attr or attr.endswith(".py"):
        module, attr = target, ""  # no attribute part (a colon may be in a path)
    is_file = module.endswith(".py") or os.sep in module
    if not attr and not is_file:  # a module of @glidemq.task functions
        if not all(part.isidentifier() for part in module.split(".")):
            raise ValidationError(
                "processor",
                f"expected 'module:attr', a module of tasks or 'path/to/file.py[:attr]', "
                f"got {target!r}",
            )
        return module
    if not attr:
        attr = DEFAULT_ATTR
    if not module or not all(part.isidentifier() for part in attr.split(".")):
        raise ValidationError("processor", f"malformed processor target {target!r}")
    if is_file:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise ValidationError("processor", f"no such file: {module}")
        return f"{path}:{attr}"
    if not all(part.isidentifier() for part in module.split(".")):
        raise ValidationError("processor", f"malformed module name in {target!r}")
    return f"{module}:{attr}"


def processor_target(processor: Any) -> str:
    """The target a child imports for `processor`: a string target as given (checked), or a
    module-level function named by its module and qualified name.

    A lambda, a closure, a bound method or a function of `__main__` cannot be found again by
    a child that imports it, so they are refused with a hint.
    """
    if isinstance(processor, str):
        return normalize_target(processor)
    module = getattr(processor, "__module__", None)
    qualname = getattr(processor, "__qualname__", None)
    hint = "pass 'module:attr' or 'path/to/file.py[:attr]' instead"
    if not callable(processor) or not module or not qualname:
        raise ValidationError("processor", f"{processor!r} cannot be run in a sandbox; {hint}")
    if module == "__main__" or "<" in qualname:
        raise ValidationError(
            "processor",
            f"{qualname} is defined in __main__ or inside a function, so a sandbox child cannot "
            f"import it; {hint}",
        )
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not processor:
        raise ValidationError(
            "processor", f"{module}:{qualname} does not name {processor!r}; {hint}"
        )
    return f"{module}:{qualname}"
