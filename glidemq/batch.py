"""Batch mode of a Worker: jobs are grouped and handed to the processor as a list."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .context import now_ms
from .errors import BatchError, GlideMQError, UnrecoverableError, ValidationError
from .serialize import encode_json
from .types import BatchOptions

if TYPE_CHECKING:
    from .job import Job
    from .worker import Worker

__all__ = ["BatchRunner"]

D = TypeVar("D")
R = TypeVar("R")


class BatchRunner(Generic[D, R]):
    """Collects a worker's fetched jobs into batches of `size` (a partial batch waits at
    most `timeout_ms`), runs the processor once per batch and records each job's outcome:
    successes complete together, failures (a BatchError entry, or the whole call) one by one.
    """

    def __init__(self, worker: Worker[D, R], options: BatchOptions) -> None:
        self.worker = worker
        self.options = options
        self.buffer: list[Job[D, R]] = []
        self.timer: asyncio.TimerHandle | None = None

    def add(self, job: Job[D, R]) -> None:
        """Take a fetched job; `dispatch()` starts what is ready."""
        self.buffer.append(job)

    def stop(self) -> None:
        """No more partial batches (the worker is closing)."""
        if self.timer is not None:
            self.timer.cancel()

    def dispatch(self, timer: bool = False) -> None:
        """Start full batches now; a partial one when its wait runs out."""
        w = self.worker
        size = self.options.size
        loop = asyncio.get_running_loop()
        while len(self.buffer) >= size or (timer and self.buffer):
            jobs, self.buffer = self.buffer[:size], self.buffer[size:]
            task = loop.create_task(self.run(jobs))
            for job in jobs:
                w._active[job.entry_id or ""] = (job, task)
        if timer:
            self.timer = None
        if self.buffer and self.timer is None:
            self.timer = loop.call_later(self.options.timeout_ms / 1000, self.dispatch, True)

    async def run(self, jobs: list[Job[D, R]]) -> None:
        """Run one batch and record every job's outcome."""
        w = self.worker
        now = now_ms()
        expired = [j for j in jobs if j.expire_at is not None and now > j.expire_at]
        if expired:
            from .worker import expired_error

            jobs = [j for j in jobs if j not in expired]
            w._running -= len(expired)
            await asyncio.gather(*(w._fail(j, expired_error(), counted=True) for j in expired))
            if not jobs:
                return
        n = len(jobs)
        try:
            if w._is_async:
                results: Any = await w._processor(jobs)  # type: ignore[arg-type,misc]
            else:
                results = await w._in_thread(jobs)
        except asyncio.CancelledError:
            w._running -= n
            if not w._closing:  # some job of the batch was revoked or lost
                await self.settle_cancelled(jobs)
            return  # closing: the jobs are handed back by deferActive
        except BatchError as exc:
            results = exc.results
            if len(results) != n:
                results = [
                    ValidationError("batch", f"BatchError has {len(results)} results for {n} jobs")
                ] * n
        except BaseException as exc:
            results = [exc] * n
        if not isinstance(results, list | tuple) or len(results) != n:
            got = len(results) if isinstance(results, list | tuple) else type(results).__name__
            error = ValidationError("batch", f"batch processor returned {got} results for {n} jobs")
            results = [error] * n
        failures: list[tuple[Job[D, R], BaseException]] = []
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException):
                failures.append((job, result))
                continue
            try:
                rv = encode_json(result)
            except TypeError as exc:
                failures.append((job, TypeError(f"return value is not JSON-serializable: {exc}")))
                continue
            w._complete_later(job, result, rv)
        w._running -= len(failures)
        await asyncio.gather(*(w._fail(job, err, counted=True) for job, err in failures))

    async def settle_cancelled(self, jobs: list[Job[D, R]]) -> None:
        """A batch cancelled for one job: revoked jobs fail, the rest go back to the queue."""
        w = self.worker
        assert w._ctx is not None
        revoked = [j for j in jobs if j.id in w._revoked]
        back = [j for j in jobs if j not in revoked and (j.entry_id or "") in w._active]
        for job in revoked:
            w._revoked.discard(job.id)
        await asyncio.gather(
            *(w._fail(j, UnrecoverableError("revoked"), counted=True) for j in revoked)
        )
        if back:
            args = [w.consumer]
            for job in back:
                args += [job.entry_id or "", job.id]
                w._active.pop(job.entry_id or "", None)
            try:
                await w._ctx.fcall("glidemq_deferActive", [w.keys.stream, w.keys.events], args)
            except GlideMQError as exc:
                w.events.emit("error", exc)  # left in the PEL: stall recovery takes them
        w._wake.set()
