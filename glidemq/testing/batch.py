"""Batch mode of a TestWorker: jobs are grouped and handed to the processor as a list."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..batch import BatchCollector, batch_outcomes, encoded_outcome
from ..failure import expired_error
from ..serializers import Serializer
from ..types import BatchOptions
from .job import TestJob

__all__ = ["BatchRunner", "TestBatchHooks"]

D = TypeVar("D")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TestBatchHooks(Generic[D, R]):
    """What the batch runner of a TestWorker calls on it: `hold` records a batch's task in
    the job table, `run` calls the processor, `expired`, `fail` and `complete` record a
    job's outcome, `settle` handles a batch cancelled for one of its jobs, `closing` says
    whether the worker is closing."""

    __test__ = False  # not a pytest test class

    hold: Callable[[str, TestJob[D, R], asyncio.Task[Any]], None]
    run: Callable[[list[TestJob[D, R]]], Awaitable[Any]]
    expired: Callable[[TestJob[D, R]], bool]
    fail: Callable[[TestJob[D, R], BaseException], Awaitable[None]]
    complete: Callable[[TestJob[D, R], Any, bytes], None]
    settle: Callable[[list[TestJob[D, R]]], Awaitable[None]]
    closing: Callable[[], bool]
    result_limit: int | None
    serializer: Serializer | None


class BatchRunner(BatchCollector[TestJob[D, R]]):
    """Collects a worker's jobs into batches of `size` (a partial batch waits at most
    `timeout_ms` of real time), runs the processor once per batch and records each job's
    outcome, with the rules of the real batch mode."""

    def __init__(self, options: BatchOptions, hooks: TestBatchHooks[D, R]) -> None:
        super().__init__(hooks.hold, options)
        self.hooks = hooks

    async def run(self, jobs: list[TestJob[D, R]]) -> None:
        """Run one batch and record every job's outcome."""
        h = self.hooks
        expired = [j for j in jobs if h.expired(j)]
        if expired:
            jobs = [j for j in jobs if j not in expired]
            await asyncio.gather(*(h.fail(j, expired_error()) for j in expired))
            if not jobs:
                return
        try:
            results = await batch_outcomes(h.run(jobs), len(jobs))
        except asyncio.CancelledError:
            if not h.closing():  # some job of the batch was revoked
                await h.settle(jobs)
            return  # closing: the jobs are handed back by close()
        for job, result in zip(jobs, results, strict=True):
            outcome = encoded_outcome(result, h.result_limit, h.serializer)
            if isinstance(outcome, BaseException):
                await h.fail(job, outcome)
            else:
                h.complete(job, result, outcome)
