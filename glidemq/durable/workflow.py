"""Workflow handles: `@glidemq.workflow(queue)` turns an async function taking a
WorkflowContext into a task whose job is the durable run of that function. Everything a task
handle does (adds, sync adds, `flow_job`, `glidemq-run` finding it in its module) it does
too; `start` adds a run and `signal` sends it an event."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..client.connection import ConnectionLike
from ..encoding import payload
from ..errors import DelayedError, ValidationError
from ..job.job import Job
from ..keys import validate_queue_name
from ..processor import is_async_callable
from ..tasks import Task
from ..types import JobOptions
from .context import Parked, WorkflowContext

__all__ = ["Workflow", "workflow"]

P = ParamSpec("P")
R = TypeVar("R")


class Workflow(Task[P, R]):
    """A durable workflow of `queue` under the job name `name` (see glidemq.durable).

    Its job data is the call's arguments (the context is not one of them), checked and
    stored as a task's are; `options` are the job options of every run (`attempts` and
    `backoff` are also every step's defaults)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        queue: str,
        name: str,
        *,
        connection: ConnectionLike,
        prefix: str | None,
        options: JobOptions,
    ) -> None:
        if not is_async_callable(fn):
            raise ValidationError(name, "a workflow is an async function (async def)")
        params = list(inspect.signature(fn).parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise ValidationError(name, "a workflow takes its WorkflowContext as first parameter")
        super().__init__(
            fn,
            queue,
            name,
            connection=connection,
            prefix=prefix,
            options=options,
            schedule=None,
        )
        self.signature = self.signature.replace(parameters=params[1:])

    def __repr__(self) -> str:
        return f"<glidemq workflow {self.name!r} on queue {self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        raise TypeError(
            f"workflow {self.name!r} runs on a worker: start it with "
            f"`await {self.name}.start(...)` (or `.delay(...)` from sync code)"
        )

    def with_options(self, **options: Any) -> Workflow[P, R]:
        """A handle of the same workflow whose runs get these job options too."""
        merged = JobOptions.coerce({**_set(self.options), **options, "workflow": True})
        clone: Workflow[P, R] = Workflow.__new__(Workflow)
        clone.__dict__.update(self.__dict__)
        clone.__dict__.pop("_where_cache", None)
        clone.options = merged
        return clone

    async def start(self, *args: P.args, **kwargs: P.kwargs) -> Job[Any, R] | None:
        """Start a run with these arguments (checked now): its Job, or None when a `job_id`
        or deduplication option skipped it. `delay(...)` is the same from sync code."""
        return await self.add(*args, **kwargs)

    async def signal(self, job_id: str, name: str, data: Any = None) -> str:
        """Send event `name` with `data` to run `job_id`: a run waiting for it goes on, any
        other unfinished run keeps it for its next `wait_for_event(name)`. Returns the run's
        state; JobStateError when it finished (or its mailbox is full)."""
        return await self._async_queue().signal(job_id, name, data)

    async def run(self, job: Job[Any, Any]) -> Any:
        """Run (or resume) the workflow for `job`, a worker's running job: its result as
        JSON data; DelayedError when the run ended at a sleep, a wait, a child or a step's
        next attempt (the job has moved there)."""
        args, kwargs = self.arguments(job.data)
        ctx = WorkflowContext(job)
        fn = typing.cast(Callable[..., Coroutine[Any, Any, Any]], self.fn)
        try:
            result = await fn(ctx, *args, **kwargs)
        except Parked as parked:
            raise DelayedError(f"workflow {job.id} waits: {parked}") from None
        finally:
            ctx.close()
        return payload.encode(result, self._hints.get("return", Any), f"{self.name}.return")


def _set(options: JobOptions) -> dict[str, Any]:
    defaults = JobOptions()
    return {
        name: getattr(options, name)
        for name in JobOptions.__dataclass_fields__
        if getattr(options, name) != getattr(defaults, name)
    }


def workflow(
    queue: str,
    /,
    *,
    name: str | None = None,
    connection: ConnectionLike = None,
    prefix: str | None = None,
    **options: Any,
) -> Callable[[Callable[Concatenate[WorkflowContext, P], Coroutine[Any, Any, R]]], Workflow[P, R]]:
    """Declare an async function `(ctx, *args) -> result` as a durable workflow of `queue`.

    @glidemq.workflow("orders", attempts=3)
    async def fulfil(ctx: glidemq.WorkflowContext, order_id: str) -> dict: ...

    `name` is the job name (default: the function's name); `options` are JobOptions for
    every run (unknown keys are an error); `connection` and `prefix` default to
    `configure_tasks` (then `GLIDEMQ_URL`), as for tasks."""
    validate_queue_name(queue)
    if "workflow" in options:
        raise ValidationError("workflow", "is set by @glidemq.workflow itself")
    job_options = JobOptions.coerce({**options, "workflow": True})

    def wrap(
        fn: Callable[Concatenate[WorkflowContext, P], Coroutine[Any, Any, R]],
    ) -> Workflow[P, R]:
        if not callable(fn):
            raise ValidationError("workflow", f"{fn!r} is not callable")
        return Workflow(
            fn,
            queue,
            name or str(getattr(fn, "__name__", "workflow")),
            connection=connection,
            prefix=prefix,
            options=job_options,
        )

    return wrap
