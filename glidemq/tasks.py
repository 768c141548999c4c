"""Task handles: a function declared with `@glidemq.task(queue)` is added by calling it
through the handle (`await send.add(to=...)`, `send.delay(to=...)`) and run by a worker that
routes each job of the queue to its function by the job's name.

The job's data is the call's arguments, one entry per parameter name, each checked against
the parameter's type hint and stored as JSON (`payload`); before the run they are checked
again and turned back into what the hints name. A job whose arguments do not fit fails at
once with TaskArgumentError, which no retry could mend.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import inspect
import threading
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .client.connection import ConnectionLike, ConnectionOptions, resolve_connection
from .encoding import payload
from .encoding.binding import Binder, param_hint
from .errors import GlideMQError, TaskArgumentError, ValidationError
from .flows.builders import GROUP_JOB_NAME
from .flows.plan import FlowJob
from .job.job import Job
from .keys import DEFAULT_PREFIX, validate_job_name, validate_queue_name
from .options import foreign
from .options.durability import DurabilityLike
from .processor import ProcessorSpec, is_async_callable
from .queue.queue import Queue
from .sync import Job as SyncJob
from .sync import Queue as SyncQueue
from .types import JobOptions

__all__ = ["Task", "configure_tasks", "current_job", "task", "task_processor"]

P = ParamSpec("P")
R = TypeVar("R")

_current: contextvars.ContextVar[Job[Any, Any]] = contextvars.ContextVar("glidemq_current_job")


def current_job() -> Job[Any, Any]:
    """The job the calling task is running for (its progress, log, attempts, ...). In a
    sync task its methods return when done (`current_job().update_progress(50)`), in an
    async task they are awaited as usual.

    Raises GlideMQError outside a task run by a worker."""
    try:
        return _current.get()
    except LookupError:
        raise GlideMQError("current_job() is only known inside a task run by a worker") from None


# -- where tasks are added ---------------------------------------------------------------------


@dataclass
class _Defaults:
    connection: ConnectionLike = None
    prefix: str = DEFAULT_PREFIX
    durability: DurabilityLike = None
    generation: int = 0  # bumped by configure_tasks: handles drop the queues they cached


_defaults = _Defaults()
_sync_queues: dict[tuple[str, str, str], SyncQueue[Any, Any]] = {}
_sync_lock = threading.Lock()
_loop_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, Queue[Any, Any]]]
_loop_queues = weakref.WeakKeyDictionary()


def configure_tasks(
    *,
    connection: ConnectionLike = None,
    prefix: str = DEFAULT_PREFIX,
    durability: DurabilityLike = None,
) -> None:
    """Where tasks declared without `connection` / `prefix` are added: a URL or
    ConnectionOptions (None: the `GLIDEMQ_URL` environment variable) and a key prefix.
    `durability` applies to tasks declared without one (docs/DURABILITY.md). `glidemq-run`
    sets all three to what it serves."""
    _defaults.connection = None if connection is None else resolve_connection(connection)
    _defaults.prefix = prefix
    _defaults.durability = durability
    _defaults.generation += 1


# -- the handle --------------------------------------------------------------------------------


class Task(Generic[P, R]):
    """A function declared as a task of `queue`, under the job name `name`.

    Calling the handle runs the function here and now; `add` / `delay` put a job on the
    queue instead. `options` are the job options every job of the task gets; `schedule`
    (cron or every) makes `glidemq-run` keep a scheduler adding one job on it."""

    def __init__(
        self,
        fn: Callable[P, R],
        queue: str,
        name: str,
        *,
        connection: ConnectionLike,
        prefix: str | None,
        options: JobOptions,
        schedule: Mapping[str, Any] | None,
        durability: DurabilityLike = None,
    ) -> None:
        self.fn = fn
        self.durability = durability
        self.queue = queue
        self.name = validate_job_name(name)
        self.connection = connection
        self.prefix = prefix
        self.options = options
        self.schedule = dict(schedule) if schedule else None
        self.signature = inspect.signature(fn)
        self.is_async = is_async_callable(fn)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<glidemq task {self.name!r} on queue {self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    if not typing.TYPE_CHECKING:  # at run time only: type checkers still catch typos

        def __getattr__(self, name: str) -> Any:
            # names the handle lacks; Celery's (.s, .apply_async, ...) get glidemq's way
            raise foreign.missing_attribute("Task", name, foreign.TASK_METHODS)

    @functools.cached_property
    def _hints(self) -> dict[str, Any]:
        try:
            return typing.get_type_hints(self.fn)
        except Exception as exc:  # a hint naming what the module does not define
            raise ValidationError(self.name, f"cannot read the type hints: {exc}") from exc

    # -- arguments <-> job data ------------------------------------------------------------

    @functools.cached_property
    def _binder(self) -> Binder | None:
        return Binder.of(self.name, self.signature, self._hints)

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The job data for this call: each argument by name, checked and made JSON.

        Raises TaskArgumentError naming the argument (`send.to`)."""
        binder = self._binder
        if binder is not None:
            data = binder.payload(args, kwargs)
            if data is not None:
                return data
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            for key in kwargs.keys() & foreign.OPTIONS.keys():  # delay(..., countdown=10)
                if key not in self.signature.parameters:
                    hint = foreign.OPTIONS[key]
                    where = f"{self.name}.{key}"
                    raise TaskArgumentError(where, f"not an argument: {hint}") from None
            raise TaskArgumentError(self.name, str(exc)) from None
        for param in self.signature.parameters.values():
            if (
                param.name not in bound.arguments
                and param.default is param.empty
                and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD)
            ):
                raise TaskArgumentError(f"{self.name}.{param.name}", "missing required argument")
        hints, params, encode = self._hints, self.signature.parameters, payload.encode_argument
        return {
            key: encode(value, param_hint(params[key], hints), f"{self.name}.{key}")
            for key, value in bound.arguments.items()
        }

    def arguments(self, data: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments a job's data stands for, each checked and
        decoded by its hint; TaskArgumentError when the data does not fit the signature."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise TaskArgumentError(
                self.name, f"job data must be an object of arguments, got {type(data).__name__}"
            )
        hints = self._hints
        decoded: dict[str, Any] = {}
        rest = dict(data)
        for param in self.signature.parameters.values():
            where = f"{self.name}.{param.name}"
            if param.name not in rest:
                if param.default is param.empty and param.kind not in (
                    param.VAR_POSITIONAL,
                    param.VAR_KEYWORD,
                ):
                    raise TaskArgumentError(where, "missing required argument")
                continue
            value = payload.decode(rest.pop(param.name), param_hint(param, hints), where)
            decoded[param.name] = tuple(value) if param.kind is param.VAR_POSITIONAL else value
        if rest:
            names = ", ".join(sorted(rest))
            raise TaskArgumentError(f"{self.name}.{sorted(rest)[0]}", f"unexpected: {names}")
        bound = inspect.BoundArguments(self.signature, collections.OrderedDict(decoded))
        return list(bound.args), dict(bound.kwargs)

    def result_of(self, value: Any) -> R:
        """A stored return value as the function's return annotation names it."""
        return typing.cast(
            R, payload.decode(value, self._hints.get("return", Any), f"{self.name}.return")
        )

    async def run(self, job: Job[Any, Any]) -> Any:
        """Run the function for `job` (current_job() is `job` meanwhile) and return its
        result as JSON data. A sync function runs on a thread of its own."""
        args, kwargs = self.arguments(job.data)
        if self.is_async:
            token = _current.set(job)
            try:
                result = await typing.cast(Any, self.fn)(*args, **kwargs)
            finally:
                _current.reset(token)
        else:
            result = await _in_thread(self.fn, args, kwargs, job)
        return payload.encode(result, self._hints.get("return", Any), f"{self.name}.return")

    # -- adding ---------------------------------------------------------------------------

    def with_options(self, **options: Any) -> Task[P, R]:
        """A handle of the same task whose jobs get these options too (`delay=60_000`,
        `priority=`, `job_id=`, ...; unknown keys are an error)."""
        merged = JobOptions.coerce({**_set_options(self.options), **options})
        clone: Task[P, R] = Task.__new__(Task)
        clone.__dict__.update(self.__dict__)
        clone.options = merged
        return clone

    def flow_job(
        self, *args: P.args, **kwargs: P.kwargs
    ) -> FlowJob:  # the children list is for the caller to fill, so not a keyword here
        """This call as one job of a flow, for `chain`, `group`, `chord` or a tree of
        FlowJobs (as Celery's `task.s(...)`); add it with a FlowProducer."""
        return FlowJob(self.name, self.queue, self.payload(*args, **kwargs), self.options)

    def _where(self) -> tuple[ConnectionOptions, str]:
        cached = self.__dict__.get("_where_cache")
        if cached is not None and cached[0] == _defaults.generation:
            return cached[1], cached[2]
        connection = self.connection if self.connection is not None else _defaults.connection
        prefix = self.prefix if self.prefix is not None else _defaults.prefix
        durability = self.durability if self.durability is not None else _defaults.durability
        # parsed once: a URL costs ~0.1 ms
        resolved = resolve_connection(connection).with_durability(durability)
        self.__dict__["_where_cache"] = (_defaults.generation, resolved, prefix)
        return resolved, prefix

    def _async_queue(self) -> Queue[Any, Any]:
        connection, prefix = self._where()
        loop = asyncio.get_running_loop()
        queues = _loop_queues.setdefault(loop, {})
        key = (self.queue, connection, prefix)
        queue = queues.get(key)
        if queue is None:
            queue = queues[key] = Queue(self.queue, connection=connection, prefix=prefix)
        return queue

    async def add(self, *args: P.args, **kwargs: P.kwargs) -> Job[Any, R] | None:
        """Add a job running the function with these arguments (checked now); the Job, or
        None when a `job_id` or deduplication option skipped it."""
        data = self.payload(*args, **kwargs)
        return await self._async_queue().add(self.name, data, self.options)

    async def add_bulk(self, calls: Iterable[Mapping[str, Any]]) -> list[Job[Any, R] | None]:
        """Add one job per mapping of keyword arguments, pipelined."""
        jobs = [(self.name, self._kw_payload(kw), self.options) for kw in calls]
        return await self._async_queue().add_bulk(jobs)

    async def add_and_wait(
        self, *args: P.args, **kwargs: P.kwargs
    ) -> R:  # timeout: with_options is for job options, so wait 30 s at most
        """Add a job and wait (30 s at most) for its return value, as the function's return
        annotation names it; JobFailedError when it failed for good."""
        data = self.payload(*args, **kwargs)
        value = await self._async_queue().add_and_wait(self.name, data, self.options)
        return self.result_of(value)

    def _kw_payload(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(kw, Mapping):
            raise TaskArgumentError(self.name, "add_bulk takes mappings of keyword arguments")
        return self.payload(**kw)  # type: ignore[call-arg]

    @property
    def sync(self) -> SyncTask[P, R]:
        """The same adds for code without an event loop (`send.sync.add(to=...)`)."""
        return SyncTask(self)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> SyncJob[Any, R] | None:
        """Add a job from sync code (as Celery's `.delay`); `sync.add`."""
        return SyncTask(self).add(*args, **kwargs)

    @classmethod
    def __glidemq_spec__(cls, tasks: Sequence[Task[Any, Any]]) -> ProcessorSpec:
        """What `glidemq-run` runs for these tasks: one router over their queues."""
        return task_spec(tasks)


class SyncTask(Generic[P, R]):
    """A task's adds for sync code, on the sync API's connection of this process."""

    def __init__(self, task: Task[P, R]) -> None:
        self.task = task

    def _queue(self) -> SyncQueue[Any, Any]:
        held = self.task.__dict__.get("_sync_queue")
        if held is not None and held[0] == _defaults.generation:
            return held[1]  # type: ignore[no-any-return]
        connection, prefix = self.task._where()  # noqa: SLF001 - its own handle
        key = (self.task.queue, connection.url, prefix)
        queue = _sync_queues.get(key)
        if queue is None:
            with _sync_lock:
                queue = _sync_queues.get(key)
                if queue is None:
                    queue = SyncQueue(self.task.queue, connection=connection, prefix=prefix)
                    _sync_queues[key] = queue
        self.task.__dict__["_sync_queue"] = (_defaults.generation, queue)
        return queue

    def add(self, *args: P.args, **kwargs: P.kwargs) -> SyncJob[Any, R] | None:
        """Add a job running the function with these arguments; blocks until added."""
        data = self.task.payload(*args, **kwargs)
        return self._queue().add(self.task.name, data, self.task.options)

    def add_bulk(self, calls: Iterable[Mapping[str, Any]]) -> list[SyncJob[Any, R] | None]:
        """Add one job per mapping of keyword arguments, pipelined."""
        task = self.task
        jobs = [(task.name, task._kw_payload(kw), task.options) for kw in calls]  # noqa: SLF001
        return self._queue().add_bulk(jobs)

    def add_and_wait(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Add a job and block (30 s at most) until its return value."""
        data = self.task.payload(*args, **kwargs)
        value = self._queue().add_and_wait(self.task.name, data, self.task.options)
        return self.task.result_of(value)


def _set_options(options: JobOptions) -> dict[str, Any]:
    defaults = JobOptions()
    return {
        name: getattr(options, name)
        for name in JobOptions.__dataclass_fields__
        if getattr(options, name) != getattr(defaults, name)
    }


class _BlockingJob:
    """The running job as a sync task sees it: the Job's fields, and its coroutine methods
    (update_progress, log, ...) run on the worker's loop, returning when done."""

    def __init__(self, job: Job[Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        self._job = job
        self._loop = loop

    def __repr__(self) -> str:
        return repr(self._job)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._job, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(value(*args, **kwargs), self._loop).result()

        return blocking


_executor: ThreadPoolExecutor | None = None
_MAX_THREADS = 1024  # started on demand; the worker's concurrency bounds how many run


async def _in_thread(
    fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], job: Job[Any, Any]
) -> Any:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=_MAX_THREADS, thread_name_prefix="glidemq-task")
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    context.run(_current.set, typing.cast(Job[Any, Any], _BlockingJob(job, loop)))
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await loop.run_in_executor(_executor, call)


# -- the decorator -----------------------------------------------------------------------------


@overload
def task(queue: str, /) -> Callable[[Callable[P, R]], Task[P, R]]: ...
@overload
def task(
    queue: str,
    /,
    *,
    name: str | None = None,
    connection: ConnectionLike = None,
    prefix: str | None = None,
    cron: str | None = None,
    every: int | None = None,
    tz: str | None = None,
    schedule_args: Mapping[str, Any] | None = None,
    durability: DurabilityLike = None,
    **options: Any,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...
def task(
    queue: str,
    /,
    *,
    name: str | None = None,
    connection: ConnectionLike = None,
    prefix: str | None = None,
    cron: str | None = None,
    every: int | None = None,
    tz: str | None = None,
    schedule_args: Mapping[str, Any] | None = None,
    durability: DurabilityLike = None,
    **options: Any,
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Declare a function (async or sync) as a task of `queue`.

        @glidemq.task("emails", attempts=3, backoff=Backoff("exponential", 1000))
        def send(to: str, subject: str = "hi") -> bool: ...

    `name` is the job name (default: the function's name); `options` are JobOptions for
    every job (unknown keys are an error); `cron` (with `tz`) or `every` (ms) make
    `glidemq-run` keep one scheduler adding a job with `schedule_args` on that schedule.
    `connection`, `prefix` and `durability` default to `configure_tasks` (then
    `GLIDEMQ_URL`)."""
    validate_queue_name(queue)
    job_options = JobOptions.coerce(options)
    if cron is not None and every is not None:
        raise ValidationError("cron", "give cron or every, not both")
    if tz is not None and cron is None:
        raise ValidationError("tz", "a time zone applies to a cron schedule only")
    if schedule_args is not None and cron is None and every is None:
        raise ValidationError("schedule_args", "needs a cron or every schedule")
    schedule: dict[str, Any] | None = None
    if cron is not None or every is not None:
        schedule = {"cron": cron, "every_ms": every, "tz": tz, "args": dict(schedule_args or {})}

    def wrap(fn: Callable[P, R]) -> Task[P, R]:
        if not callable(fn):
            raise ValidationError("task", f"{fn!r} is not callable")
        handle = Task(
            fn,
            queue,
            str(getattr(fn, "__name__", "task")) if name is None else name,
            connection=connection,
            prefix=prefix,
            options=job_options,
            schedule=schedule,
            durability=durability,
        )
        if schedule is not None:
            schedule_of(handle)  # bad schedule or arguments fail at import
        return handle

    return wrap


def schedule_of(handle: Task[Any, Any]) -> dict[str, Any] | None:
    """The scheduler `glidemq-run` upserts for a task: queue, name and the
    `upsert_job_scheduler` keywords (JSON data); None without a schedule."""
    if handle.schedule is None:
        return None
    from .queue.schedulers import build  # validates the cron expression and time zone

    spec = handle.schedule
    data = handle.payload(**spec["args"])
    options = {"cron": spec["cron"], "every_ms": spec["every_ms"], "tz": spec["tz"]}
    build(
        handle.name,
        **options,
        start_date=None,
        end_date=None,
        limit=None,
        template={"name": handle.name, "data": data},
        compress=False,
    )
    return {
        "queue": handle.queue,
        "name": handle.name,
        "options": options,
        "template": {"name": handle.name, "data": data, "opts": _set_options(handle.options)},
    }


# -- the worker side ---------------------------------------------------------------------------


def _table(tasks: Sequence[Task[Any, Any]]) -> dict[Any, Task[Any, Any]]:
    if not tasks:
        raise ValidationError("tasks", "no task to run")
    table: dict[Any, Task[Any, Any]] = {}
    for handle in tasks:
        if not isinstance(handle, Task):
            raise ValidationError("tasks", f"{handle!r} is not a glidemq task")
        other = table.get((handle.queue, handle.name))
        if other is not None and other.fn is not handle.fn:
            raise ValidationError(
                handle.name, f"two tasks on queue {handle.queue!r} share the name {handle.name!r}"
            )
        table[(handle.queue, handle.name)] = handle
        table.setdefault(handle.name, handle)  # a queue given by --queue routes by name
    return table


def _route(table: Mapping[Any, Task[Any, Any]], job: Job[Any, Any]) -> Task[Any, Any]:
    found = table.get((job.queue_name, job.name)) or table.get(job.name)
    if found is None:
        names = sorted({t.name for t in table.values()})
        raise TaskArgumentError(
            job.name, f"no task named {job.name!r} here (this worker runs: {', '.join(names)})"
        )
    return found


def task_processor(*tasks: Task[Any, Any]) -> Callable[[Job[Any, Any]], Any]:
    """A processor for a Worker that runs these tasks, each job by its name (a name no task
    has fails the job as unrecoverable). Async tasks run on the worker's loop, sync ones on
    threads (as many as the worker's concurrency lets run).

    The parent job `glidemq.group` adds (`__group__`) needs no task: unless a task has that
    name, it returns its children's values (`get_children_values()`, by child key)."""
    table = _table(tasks)

    async def run(job: Job[Any, Any]) -> Any:
        if job.name == GROUP_JOB_NAME and GROUP_JOB_NAME not in table:
            return await job.get_children_values()
        return await _route(table, job).run(job)

    return run


def task_spec(tasks: Sequence[Task[Any, Any]]) -> ProcessorSpec:
    """These tasks as one processor for `glidemq-run`: their queues, a router, and the
    schedulers they declare."""
    function = task_processor(*tasks)
    queues = tuple(dict.fromkeys(t.queue for t in tasks))
    schedules = tuple(s for s in (schedule_of(t) for t in tasks) if s is not None)
    return replace(ProcessorSpec(function, queues), schedules=schedules)
