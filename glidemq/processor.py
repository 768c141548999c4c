"""Processors: as the runtime finds them (`module:attr`, plain or decorated with
`processor`), and as a worker of either engine calls them (`ProcessorCall`)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .errors import JobTimeoutError, ValidationError
from .keys import validate_queue_name

__all__ = ["ProcessorSpec", "load_processor", "processor"]


def is_async_callable(fn: object) -> bool:
    """Whether calling `fn` gives a coroutine: a coroutine function, or an object whose
    `__call__` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def check_processor(processor: object) -> Callable[[Any], Any]:
    """`processor`, if a worker can call it in this process; else ValidationError."""
    if not callable(processor):
        hint = ""
        if isinstance(processor, str):
            hint = " (a 'module:attr' target runs only with sandbox=SandboxOptions(...))"
        raise ValidationError("processor", f"must be callable, got {processor!r}{hint}")
    return processor


class ProcessorCall:
    """A worker's processor, ready to call: a coroutine function runs on the event loop,
    anything else on the worker's own threads (`threads` of them, one per concurrency slot).

    A thread cannot be interrupted: on timeout or revoke the job fails, but the call runs on
    until it returns."""

    def __init__(self, fn: Callable[[Any], Any], threads: int, thread_name: str) -> None:
        self.fn = fn
        self.is_async = is_async_callable(fn)
        self._threads = threads
        self._thread_name = thread_name
        self._executor: ThreadPoolExecutor | None = None

    async def _in_thread(self, arg: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._threads, thread_name_prefix=self._thread_name
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.fn, arg)

    async def _sync(self, job: Any) -> Any:
        result = await self._in_thread(job)
        if inspect.isawaitable(result):
            return await result
        return result

    def _call(self, job: Any) -> Awaitable[Any]:
        # The coroutine itself, not a wrapper around it: one frame less per job.
        return self.fn(job) if self.is_async else self._sync(job)

    async def job(self, job: Any, timeout_ms: int | None = None) -> Any:
        """Run the processor on one job and return its result; with `timeout_ms`, fail with
        JobTimeoutError('timeout') when it takes longer. A sync processor's awaitable
        result is awaited."""
        if timeout_ms:
            try:
                return await asyncio.wait_for(self._call(job), timeout_ms / 1000)
            except TimeoutError:
                raise JobTimeoutError("timeout") from None
        return await self._call(job)

    async def batch(self, jobs: list[Any]) -> Any:
        """Run a batch processor on `jobs` and return what it returned."""
        if self.is_async:
            return await self.fn(jobs)
        return await self._in_thread(jobs)

    def shutdown(self) -> None:
        """Release the threads; calls in progress run on until they return."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class ProcessorSpec:
    """A processor with the queue(s) it serves and Worker options for it.

    `batch=True` means the function takes a list of jobs and returns a list of results.
    """

    function: Callable[..., Any]
    queues: tuple[str, ...] = ()
    batch: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        return is_async_callable(self.function)


def processor(
    queue: str | tuple[str, ...] | list[str] | None = None,
    *,
    batch: bool = False,
    **options: Any,
) -> Callable[[Callable[..., Any]], ProcessorSpec]:
    """Declare a processor's queue(s) and Worker options for `glidemq-run`.

    @glidemq.processor("emails", concurrency=20)
    async def send(job): ...
    """
    from .types import WorkerOptions, from_mapping

    from_mapping(WorkerOptions, options)  # unknown or invalid options fail at import time
    queues: tuple[str, ...]
    if queue is None:
        queues = ()
    elif isinstance(queue, str):
        queues = (queue,)
    else:
        queues = tuple(queue)
    for name in queues:
        validate_queue_name(name)  # a bad name fails at import, like a bad option

    def wrap(fn: Callable[..., Any]) -> ProcessorSpec:
        if not callable(fn):
            raise ValidationError("processor", f"{fn!r} is not callable")
        return ProcessorSpec(fn, queues, batch, dict(options))

    return wrap


def load_processor(target: str) -> ProcessorSpec:
    """Import `module:attr` (or `path/to/file.py:attr`) and return it as a ProcessorSpec.

    Raises ValidationError for a malformed target, a missing attribute or a non-callable;
    an import error propagates with its traceback.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValidationError("processor", f"expected MODULE:ATTR, got {target!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise ValidationError("processor", f"no such file: {module_name}")
        directory, filename = os.path.split(path)
        sys.path.insert(0, directory)
        module_name = filename.removesuffix(".py")
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the working directory is importable
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValidationError(
                "processor", f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    if isinstance(obj, ProcessorSpec):
        return obj
    if not callable(obj):
        raise ValidationError("processor", f"{target} is {type(obj).__name__}, not callable")
    return ProcessorSpec(obj)
