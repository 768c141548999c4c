"""Batch mode of a Worker: jobs are grouped and handed to the processor as a list.

`BatchCollector` gathers jobs into batches; `batch_outcomes` and `encoded_outcome` read what
the processor returned; `BatchRunner` runs the batches and records each job's outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..encoding.serialize import encode_result
from ..encoding.serializers import Serializer
from ..errors import BatchError, UnrecoverableError, ValidationError
from ..job.job import Job
from ..sandbox.errors import SandboxHandBack
from ..types import BatchOptions
from .failure import expired_error

if TYPE_CHECKING:
    from ..processor import ProcessorCall
    from .link import WorkerLink

__all__ = ["BatchOutcomes", "BatchRunner"]

D = TypeVar("D")
R = TypeVar("R")
J = TypeVar("J", bound=Job[Any, Any])


class BatchCollector(Generic[J]):
    """Collects a worker's jobs into batches of up to `size`, and starts `run` once per
    batch as the task that holds its jobs (`hold(entry_id, job, task)` records it in the
    worker's job table). A batch starts once it has `min_size` jobs (default: `size`), or
    with what it has when its first job has waited `timeout_ms`. With `group`, a batch holds
    jobs of one group only (`job.group_key`; jobs without a group batch together)."""

    def __init__(
        self, hold: Callable[[str, J, asyncio.Task[Any]], None], options: BatchOptions
    ) -> None:
        self._hold = hold
        self.options = options
        self._min = options.min_size or options.size
        self._buffers: dict[str | None, list[J]] = {}
        self._timers: dict[str | None, asyncio.TimerHandle] = {}

    @property
    def buffered(self) -> int:
        """Jobs taken and not yet in a batch."""
        return sum(len(b) for b in self._buffers.values())

    def add(self, job: J) -> None:
        """Take a fetched job; `dispatch()` starts what is ready."""
        key = job.group_key if self.options.group else None
        self._buffers.setdefault(key, []).append(job)

    def stop(self) -> None:
        """No more partial batches (the worker is closing)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def dispatch(self) -> None:
        """Start every batch that has `min_size` jobs; a smaller one waits for its timer."""
        for key in list(self._buffers):
            self._start(key, expired=False)

    def _expire(self, key: str | None) -> None:
        self._timers.pop(key, None)
        self._start(key, expired=True)

    def _start(self, key: str | None, *, expired: bool) -> None:
        buffer = self._buffers.get(key, [])
        size, loop = self.options.size, asyncio.get_running_loop()
        while len(buffer) >= self._min or (expired and buffer):
            jobs, buffer = buffer[:size], buffer[size:]
            task = loop.create_task(self.run(jobs))
            for job in jobs:
                self._hold(job.entry_id or "", job, task)
        if not buffer:
            self._buffers.pop(key, None)
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            return
        self._buffers[key] = buffer
        if key not in self._timers:
            wait = self.options.timeout_ms / 1000
            self._timers[key] = loop.call_later(wait, self._expire, key)

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


@dataclass(frozen=True, slots=True)
class BatchOutcomes(Generic[D, R]):
    """How a Worker records what a job of a batch came to: `complete(job, result, encoded)`
    queues a success, `fail(job, error)` records a failed try, `defer(jobs)` hands jobs back
    unrun. Each is called once the job's slot was freed."""

    complete: Callable[[Job[D, R], Any, bytes], None]
    fail: Callable[[Job[D, R], BaseException], Awaitable[str]]
    defer: Callable[[list[Job[D, R]]], Awaitable[None]]


class BatchRunner(BatchCollector[Job[D, R]]):
    """Batches of a Worker: successes complete together, failures (a BatchError entry, or
    the whole call) one by one."""

    def __init__(
        self,
        link: WorkerLink,
        options: BatchOptions,
        proc: ProcessorCall,
        outcomes: BatchOutcomes[D, R],
        serializer: Serializer | None,
    ) -> None:
        super().__init__(link.slots.hold, options)
        self.link = link
        self.proc = proc
        self.outcomes = outcomes
        self.serializer = serializer

    async def run(self, jobs: list[Job[D, R]]) -> None:
        """Run one batch and record every job's outcome."""
        link, slots, out = self.link, self.link.slots, self.outcomes
        now = link.connection.clock.now_ms()
        expired = [j for j in jobs if j.expire_at is not None and now > j.expire_at]
        if expired:
            jobs = [j for j in jobs if j not in expired]
            slots.end(len(expired))
            await asyncio.gather(*(out.fail(j, expired_error()) for j in expired))
            if not jobs:
                return
        n = len(jobs)
        try:
            results = await batch_outcomes(self.proc.batch(jobs), n)
        except asyncio.CancelledError:
            slots.end(n)
            if not link.closing:  # some job of the batch was revoked or lost
                await self.settle_cancelled(jobs)
            return  # closing: the jobs are handed back by deferActive
        except SandboxHandBack:  # no sandbox child can run it now: back to the queue
            slots.end(n)
            await out.defer(jobs)
            return
        failures: list[tuple[Job[D, R], BaseException]] = []
        serializer = self.serializer
        for job, result in zip(jobs, results, strict=True):
            outcome = encoded_outcome(result, link.opts.max_result_bytes, serializer)
            if isinstance(outcome, BaseException):
                failures.append((job, outcome))
            else:
                out.complete(job, result, outcome)
        slots.end(len(failures))
        await asyncio.gather(*(out.fail(job, err) for job, err in failures))

    async def settle_cancelled(self, jobs: list[Job[D, R]]) -> None:
        """A batch cancelled for one job: revoked jobs fail, the rest go back to the queue."""
        slots, out = self.link.slots, self.outcomes
        assert self.link.ctx is not None
        revoked = [j for j in jobs if slots.is_revoked(j.id)]
        back = [j for j in jobs if j not in revoked and slots.holds(j.entry_id or "")]
        for job in revoked:
            slots.take_revoked(job.id)
        await asyncio.gather(*(out.fail(j, UnrecoverableError("revoked")) for j in revoked))
        if back:
            await out.defer(back)
        slots.wake()
