"""Batch mode of a TestWorker: jobs are grouped and handed to the processor as a list."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import BatchError, UnrecoverableError, ValidationError
from ..serialize import encode_json
from ..types import BatchOptions

if TYPE_CHECKING:
    from .job import TestJob
    from .worker import TestWorker

__all__ = ["BatchRunner"]

D = TypeVar("D")
R = TypeVar("R")


class BatchRunner(Generic[D, R]):
    """Collects a worker's jobs into batches of `size` (a partial batch waits at most
    `timeout_ms` of real time), runs the processor once per batch and records each job's
    outcome, with the rules of the real batch mode."""

    def __init__(self, worker: TestWorker[D, R], options: BatchOptions) -> None:
        self.worker = worker
        self.options = options
        self.buffer: list[TestJob[D, R]] = []
        self.timer: asyncio.TimerHandle | None = None

    def add(self, job: TestJob[D, R]) -> None:
        """Take a job; `dispatch()` starts what is ready."""
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

    async def run(self, jobs: list[TestJob[D, R]]) -> None:
        """Run one batch and record every job's outcome."""
        from .worker import Expired

        w = self.worker
        expired = [j for j in jobs if w._expired(j)]
        if expired:
            jobs = [j for j in jobs if j not in expired]
            await asyncio.gather(*(w._fail(j, Expired("expired")) for j in expired))
            if not jobs:
                return
        n = len(jobs)
        try:
            if w._is_async:
                results: Any = await w._processor(jobs)
            else:
                results = await w._in_thread(jobs)
        except asyncio.CancelledError:
            if not w._closing:  # some job of the batch was revoked
                await self.settle_cancelled(jobs)
            return  # closing: the jobs are handed back by close()
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
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException):
                await w._fail(job, result)
                continue
            try:
                rv = encode_json(result)
            except TypeError as exc:
                await w._fail(job, TypeError(f"return value is not JSON-serializable: {exc}"))
                continue
            w._complete(job, result, rv)

    async def settle_cancelled(self, jobs: list[TestJob[D, R]]) -> None:
        """A batch cancelled for one job: revoked jobs fail, the rest go back to the queue."""
        w = self.worker
        for job in jobs:
            if job.id in w._revoked:
                w._revoked.discard(job.id)
                await w._fail(job, UnrecoverableError("revoked"))
            elif (job.entry_id or "") in w._active:
                w._active.pop(job.entry_id or "", None)
                w._store.defer(job.id, job.entry_id or "")
        w._store.notify()
