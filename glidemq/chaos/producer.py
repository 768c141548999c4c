"""The chaos producer: adds N jobs with known ids, at a rate, surviving server outages.

Every job has a custom id (`j<i>`), so an add that failed without an answer (the server
died mid-call) is simply sent again: a job that did land is reported as a duplicate and
counts as enqueued, one that did not is added now. A job is recorded as enqueued only once
an add call for it returned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import GlideMQError, ValidationError
from ..queue.queue import Queue

__all__ = ["Producer", "job_id"]

log = logging.getLogger("glidemq.chaos")

_CHUNK = 100


def job_id(i: int) -> str:
    """The id of the i-th job of a run."""
    return f"j{i}"


class Producer:
    """Adds `total` jobs `{"ms": job_ms}` with `attempts`, calling `on_enqueued(ids, ts)`
    after each chunk lands. `rate` (jobs/s, 0 = unlimited) paces the chunks; `overrides`
    adds data to some jobs, by id; `options` are more job options for every job."""

    def __init__(
        self,
        queue: Queue[Any, Any],
        total: int,
        *,
        job_ms: float,
        attempts: int,
        rate: float,
        on_enqueued: Callable[[list[str], float], None],
        chunk: int = _CHUNK,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.overrides = dict(overrides or {})
        self.options = dict(options or {})
        self.queue = queue
        self.total = total
        self.job_ms = job_ms
        self.attempts = attempts
        self.rate = rate
        self.on_enqueued = on_enqueued
        self.chunk = chunk
        self.enqueued = 0
        self.retries = 0
        self.started_at = 0.0
        self.finished_at = 0.0
        self.done = asyncio.Event()

    async def _add_chunk(self, ids: list[str]) -> None:
        opts = {**self.options, "attempts": self.attempts}
        data = {"ms": self.job_ms}
        delay = 0.05
        while True:
            try:
                await self.queue.add_bulk(
                    [("chaos", self._data(i, data), {**opts, "job_id": i}) for i in ids]
                )
                break
            except ValidationError:
                raise
            except GlideMQError as exc:
                # Unknown outcome: send again; ids that landed come back as duplicates.
                self.retries += 1
                if self.retries in (1, 10) or self.retries % 100 == 0:
                    log.warning("add failed (%s); retrying (%d retries so far)", exc, self.retries)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        self.enqueued += len(ids)
        self.on_enqueued(ids, time.time())

    def _data(self, job: str, data: dict[str, float]) -> Mapping[str, Any]:
        extra = self.overrides.get(job)
        return {**data, **extra} if extra else data

    async def run(self) -> None:
        """Add every job; returns once all are enqueued."""
        self.started_at = time.monotonic()
        start = self.started_at
        # Up to 4 chunks in flight: fast, but still one connection's worth of pipelining.
        inflight: set[asyncio.Task[None]] = set()
        try:
            for first in range(0, self.total, self.chunk):
                ids = [job_id(i) for i in range(first, min(first + self.chunk, self.total))]
                if self.rate > 0:
                    pause = start + first / self.rate - time.monotonic()
                    if pause > 0:
                        await asyncio.sleep(pause)
                while len(inflight) >= 4:
                    done, inflight = await asyncio.wait(
                        inflight, return_when=asyncio.FIRST_COMPLETED
                    )
                    for t in done:
                        t.result()
                inflight.add(asyncio.create_task(self._add_chunk(ids)))
            while inflight:
                await inflight.pop()
        finally:
            for t in inflight:  # a chunk failed for good: stop the others too
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)
        self.finished_at = time.monotonic()
        self.done.set()
