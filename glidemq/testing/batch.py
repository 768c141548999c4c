"""Batch mode of a TestWorker: jobs are grouped and handed to the processor as a list."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeVar

from ..batch import BatchCollector, batch_outcomes, encoded_outcome
from ..errors import UnrecoverableError
from ..failure import expired_error
from ..types import BatchOptions
from .job import TestJob

if TYPE_CHECKING:
    from .worker import TestWorker

__all__ = ["BatchRunner"]

D = TypeVar("D")
R = TypeVar("R")


class BatchRunner(BatchCollector[TestJob[D, R]]):
    """Collects a worker's jobs into batches of `size` (a partial batch waits at most
    `timeout_ms` of real time), runs the processor once per batch and records each job's
    outcome, with the rules of the real batch mode."""

    def __init__(self, worker: TestWorker[D, R], options: BatchOptions) -> None:
        super().__init__(worker, options)
        self.worker = worker

    async def run(self, jobs: list[TestJob[D, R]]) -> None:
        """Run one batch and record every job's outcome."""
        w = self.worker
        expired = [j for j in jobs if w._expired(j)]
        if expired:
            jobs = [j for j in jobs if j not in expired]
            await asyncio.gather(*(w._fail(j, expired_error()) for j in expired))
            if not jobs:
                return
        try:
            results = await batch_outcomes(w._proc.batch(jobs), len(jobs))
        except asyncio.CancelledError:
            if not w._closing:  # some job of the batch was revoked
                await self.settle_cancelled(jobs)
            return  # closing: the jobs are handed back by close()
        for job, result in zip(jobs, results, strict=True):
            outcome = encoded_outcome(result, w.opts.max_result_bytes, w._serializer)
            if isinstance(outcome, BaseException):
                await w._fail(job, outcome)
            else:
                w._complete(job, result, outcome)

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
