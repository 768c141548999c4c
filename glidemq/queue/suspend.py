"""Suspend and signal, the queue's side (`Queue.signal`, `get_suspended`, part of `Queue`);
the job's side, and the values both use, are in glidemq.job.signals."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import JobNotFoundError, JobStateError, ServerError
from ..job.job import Job
from ..job.signals import Signal, check_suspend, encode_signal, parse_signals, suspended_key, sweep
from ..wire import codes, features
from .queries import index_range

if TYPE_CHECKING:
    from ..client.context import QueueContext
    from ..keys import QueueKeys

__all__ = [
    "QueueSuspend",
    "Signal",
    "check_suspend",
    "encode_signal",
    "parse_signals",
    "suspended_key",
    "sweep",
]


class QueueSuspend:
    """Signals to suspended jobs and listing them; part of `Queue`."""

    keys: QueueKeys

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    async def signal(self, job_id: str, name: str, data: Any = None) -> str:
        """Wake suspended job `job_id`: it runs again with {name, data} appended to
        `job.signals`. Returns its new state; JobStateError when it is not suspended.

        A durable workflow (glidemq.durable) takes it as event `name`: waiting for it, it
        goes on with `data`; otherwise, until it finishes, the event is kept for its next
        wait of that name (the state returned is then the workflow's, unchanged).
        JobStateError when it finished or keeps too many events (100, 4 MiB)."""
        raw = encode_signal(name, data)
        ctx = await self._context()
        await sweep(ctx, ctx.now_ms())  # an expired suspension fails rather than wakes
        keys = self.keys
        state = await features.signal(ctx, suspended_key(keys), ctx.now_ms(), job_id, name, raw)
        if state == "0":
            raise JobNotFoundError(keys.name, job_id)
        if state == codes.STATE:
            raise JobStateError(job_id, "signal", "it is not suspended (or it finished)")
        if state == codes.MAILBOX_FULL:
            raise JobStateError(job_id, "signal", "its mailbox is full (100 events or 4 MiB)")
        if state == codes.TOO_LARGE:
            raise JobStateError(job_id, "signal", "the workflow's history is full (8 MiB)")
        if state.startswith("ERR"):
            raise ServerError(f"signal: {state}")
        return state

    async def get_suspended(self, start: int = 0, end: int = -1) -> list[Job[Any, Any]]:
        """Suspended jobs, the first deadline first (no deadline last); expired ones are
        failed first."""
        ctx = await self._context()
        await sweep(ctx, ctx.now_ms())
        key = suspended_key(self.keys)
        ids = await ctx.command(lambda c: c.zrange(key, index_range(start, end)))
        jobs: list[Job[Any, Any]] = []
        for raw in ids:
            fields = await ctx.get_fields(raw.decode())
            if fields is not None:
                jobs.append(Job(ctx, fields))
        return jobs

    async def get_suspended_count(self) -> int:
        """How many jobs are suspended."""
        ctx = await self._context()
        key = suspended_key(self.keys)
        return int(await ctx.command(lambda c: c.zcard(key)))
