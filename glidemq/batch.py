"""Batch mode of a Worker: jobs are grouped and handed to the processor as a list.

`BatchCollector`, `batch_outcomes` and `encoded_outcome` hold the rules of batch mode that do
not depend on the engine; glidemq.testing's BatchRunner shares them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .context import now_ms
from .errors import BatchError, UnrecoverableError, ValidationError
from .failure import expired_error
from .job import Job
from .sandbox.errors import SandboxHandBack
from .serialize import encode_result
from .serializers import Serializer
from .types import BatchOptions

if TYPE_CHECKING:
    from .lifecycle import WorkerLifecycle
    from .worker import Worker

__all__ = ["BatchRunner"]

D = TypeVar("D")
R = TypeVar("R")
J = TypeVar("J", bound=Job[Any, Any])


class BatchCollector(Generic[J]):
    """Collects a worker's jobs into batches of `size` (a partial batch waits at most
    `timeout_ms`) and starts `run` once per batch, as the task that holds its jobs."""

    def __init__(self, worker: WorkerLifecycle, options: BatchOptions) -> None:
        self._holder = worker
        self.options = options
        self.buffer: list[J] = []
        self.timer: asyncio.TimerHandle | None = None

    def add(self, job: J) -> None:
        """Take a fetched job; `dispatch()` starts what is ready."""
        self.buffer.append(job)

    def stop(self) -> None:
        """No more partial batches (the worker is closing)."""
        if self.timer is not None:
            self.timer.cancel()

    def dispatch(self, timer: bool = False) -> None:
        """Start full batches now; a partial one when its wait runs out."""
        active = self._holder._active
        size = self.options.size
        loop = asyncio.get_running_loop()
        while len(self.buffer) >= size or (timer and self.buffer):
            jobs, self.buffer = self.buffer[:size], self.buffer[size:]
            task = loop.create_task(self.run(jobs))
            for job in jobs:
                active[job.entry_id or ""] = (job, task)
        if timer:
            self.timer = None
        if self.buffer and self.timer is None:
            self.timer = loop.call_later(self.options.timeout_ms / 1000, self.dispatch, True)

    async def run(self, jobs: list[J]) -> None:
        """Run one batch and record every job's outcome."""
        raise NotImplementedError


async def batch_outcomes(call: Awaitable[Any], n: int) -> Sequence[Any]:
    """One outcome per job of a batch of `n`: a result, or the exception the job fails with.
    A BatchError gives each job its own; any other error fails them all; a wrong number of
    results fails them all with a ValidationError. CancelledError propagates."""
    try:
        results: Any = await call
    except asyncio.CancelledError:
        raise
    except BatchError as exc:
        results = exc.results
        if len(results) != n:
            results = [
                ValidationError("batch", f"BatchError has {len(results)} results for {n} jobs")
            ] * n
    except BaseException as exc:
        return [exc] * n
    if isinstance(results, list | tuple) and len(results) == n:
        return results
    got = len(results) if isinstance(results, list | tuple) else type(results).__name__
    return [ValidationError("batch", f"batch processor returned {got} results for {n} jobs")] * n


def encoded_outcome(
    result: Any, limit: int | None, serializer: Serializer | None = None
) -> bytes | BaseException:
    """A job's outcome as stored: its encoded result, or the exception it fails with (an
    outcome that is an exception, or a result that is not JSON-serializable, holds NaN or
    Infinity, or is over `limit` bytes)."""
    if isinstance(result, BaseException):
        return result
    try:
        return encode_result(result, limit, serializer)
    except (TypeError, ValueError) as exc:
        return exc.with_traceback(None)  # the stored stack: just the reason, as for a result


class BatchRunner(BatchCollector[Job[D, R]]):
    """Batches of a Worker: successes complete together, failures (a BatchError entry, or
    the whole call) one by one."""

    def __init__(self, worker: Worker[D, R], options: BatchOptions) -> None:
        super().__init__(worker, options)
        self.worker = worker

    async def run(self, jobs: list[Job[D, R]]) -> None:
        """Run one batch and record every job's outcome."""
        w = self.worker
        now = now_ms()
        expired = [j for j in jobs if j.expire_at is not None and now > j.expire_at]
        if expired:
            jobs = [j for j in jobs if j not in expired]
            w._running -= len(expired)
            await asyncio.gather(*(w._fail(j, expired_error(), counted=True) for j in expired))
            if not jobs:
                return
        n = len(jobs)
        try:
            results = await batch_outcomes(w._proc.batch(jobs), n)
        except asyncio.CancelledError:
            w._running -= n
            if not w._closing:  # some job of the batch was revoked or lost
                await self.settle_cancelled(jobs)
            return  # closing: the jobs are handed back by deferActive
        except SandboxHandBack:  # no sandbox child can run it now: back to the queue
            w._running -= n
            await w._defer(jobs)
            return
        failures: list[tuple[Job[D, R], BaseException]] = []
        for job, result in zip(jobs, results, strict=True):
            outcome = encoded_outcome(result, w.opts.max_result_bytes, w._serializer)
            if isinstance(outcome, BaseException):
                failures.append((job, outcome))
            else:
                w._complete_later(job, result, outcome)
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
            await w._defer(back)
        w._wake.set()
