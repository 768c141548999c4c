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

from .errors import JobTimeoutError, ProcessorExitError, ValidationError
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


def _from_sigint_handler(exc: BaseException) -> bool:
    """Whether `exc` is the KeyboardInterrupt asyncio.run raises on a second Ctrl-C (its
    SIGINT handler is where the traceback ends): a real interrupt, not the processor's."""
    if not isinstance(exc, KeyboardInterrupt):
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_name == "_on_sigint" and code.co_filename.endswith(
        os.path.join("asyncio", "runners.py")
    )


def user_exit(exc: BaseException) -> BaseException:
    """What a job fails with when its processor raised `exc`, which is not an Exception
    (KeyboardInterrupt, SystemExit, ...): a ProcessorExitError. Left in asyncio, those end
    the event loop and every other job with it. A real Ctrl-C stays what it is."""
    if isinstance(exc, Exception | asyncio.CancelledError) or _from_sigint_handler(exc):
        return exc
    error = ProcessorExitError(exc)
    error.__cause__ = exc
    return error


async def _guarded(call: Awaitable[Any]) -> Any:
    # An asyncio Task re-raises KeyboardInterrupt and SystemExit into the event loop, so
    # they must not leave this coroutine.
    try:
        return await call
    except (KeyboardInterrupt, SystemExit) as exc:
        error = user_exit(exc)
        if error is exc:
            raise
        raise error from exc


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
        result is awaited. KeyboardInterrupt, SystemExit and other BaseExceptions from the
        processor come out as ProcessorExitError."""
        try:
            if timeout_ms:
                # In this task, not in a task of its own (asyncio.wait_for's on 3.11): that
                # one begins a loop step later, after the worker's lease check, so a freeze
                # in between started the processor after the thaw with its lease run out.
                try:
                    async with asyncio.timeout(timeout_ms / 1000):
                        return await _guarded(self._call(job))
                except TimeoutError:
                    raise JobTimeoutError("timeout") from None
            return await self._call(job)
        except (KeyboardInterrupt, SystemExit) as exc:
            error = user_exit(exc)
            if error is exc:
                raise
            raise error from exc

    async def batch(self, jobs: list[Any]) -> Any:
        """Run a batch processor on `jobs` and return what it returned (BaseExceptions as in
        `job`)."""
        try:
            if self.is_async:
                return await self.fn(jobs)
            return await self._in_thread(jobs)
        except (KeyboardInterrupt, SystemExit) as exc:
            error = user_exit(exc)
            if error is exc:
                raise
            raise error from exc

    def shutdown(self) -> None:
        """Release the threads; calls in progress run on until they return."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class ProcessorSpec:
    """A processor with the queue(s) it serves and Worker options for it.

    `batch=True` means the function takes a list of jobs and returns a list of results.
    `schedules` are the job schedulers `glidemq-run` upserts before its workers start (as
    `glidemq.tasks.schedule_of` describes them). `setup`, when given, is called with each
    Worker `glidemq-run` builds for the processor, before it starts (to attach listeners).
    """

    function: Callable[..., Any]
    queues: tuple[str, ...] = ()
    batch: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    schedules: tuple[Mapping[str, Any], ...] = ()
    setup: Callable[[Any], None] | None = None

    @property
    def is_async(self) -> bool:
        return is_async_callable(self.function)


def processor(
    queue: str | tuple[str, ...] | list[str] | None = None,
    *,
    batch: bool = False,
    setup: Callable[[Any], None] | None = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], ProcessorSpec]:
    """Declare a processor's queue(s) and Worker options for `glidemq-run`.

    ```python
    @glidemq.processor("emails", concurrency=20)
    async def send(job): ...
    ```

    `setup(worker)` runs for each Worker glidemq-run builds for it, before the Worker
    starts: `worker.on("completed", ...)` there sees the completions the server stored.
    """
    if setup is not None and not callable(setup):
        raise ValidationError("setup", f"{setup!r} is not callable")
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
        return ProcessorSpec(fn, queues, batch, dict(options), setup=setup)

    return wrap


def _as_spec(objs: list[Any]) -> ProcessorSpec:
    # Task handles (glidemq.tasks) describe themselves, so this layer need not import them.
    return type(objs[0]).__glidemq_spec__(objs)  # type: ignore[no-any-return]


def _is_task(obj: object) -> bool:
    return hasattr(type(obj), "__glidemq_spec__")


def _import(module_name: str) -> Any:
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise ValidationError("processor", f"no such file: {module_name}")
        directory, filename = os.path.split(path)
        sys.path.insert(0, directory)
        module_name = filename.removesuffix(".py")
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the working directory is importable
    return importlib.import_module(module_name)


def load_processor(target: str) -> ProcessorSpec:
    """Import `module:attr` (or `path/to/file.py:attr`) and return it as a ProcessorSpec;
    a bare `module` stands for every `@glidemq.task` declared in it (a bare file for its
    `process`, else its tasks).

    Raises ValidationError for a malformed target, a missing attribute, a non-callable or
    a module without tasks; an import error propagates with its traceback.
    """
    module_name, sep, attr = target.partition(":")
    if not module_name or (sep and not attr):
        raise ValidationError("processor", f"expected MODULE:ATTR or MODULE, got {target!r}")
    module = _import(module_name)
    if not sep and module_name.endswith(".py") and callable(getattr(module, "process", None)):
        sep, attr = ":", "process"  # as a sandbox reads a bare file: its `process`
    if not sep:
        found = [v for v in vars(module).values() if _is_task(v)]
        if not found:
            raise ValidationError(
                "processor",
                f"module {module_name!r} declares no @glidemq.task; "
                "name a processor as MODULE:ATTR",
            )
        return _as_spec(list({id(t): t for t in found}.values()))
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
    if _is_task(obj):
        return _as_spec([obj])
    if not callable(obj):
        raise ValidationError("processor", f"{target} is {type(obj).__name__}, not callable")
    return ProcessorSpec(obj)
