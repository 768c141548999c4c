"""QueueView: one queue read and maintained over a connection shared with other queues.

It has every reading and maintenance method of `Queue` (the same code: `QueueAdmin`,
`QueueLimits` and `QueueGroups`), plus the scheduler and backpressure reads, without a
client of its own.
"""

from __future__ import annotations

from typing import Any

from ..client.context import QueueContext
from ..queue import limits as queue_limits
from ..queue import schedulers as scheduler
from ..queue.groups import QueueGroups
from ..queue.limits import QueueLimits
from ..queue.schedulers import JobScheduler
from .base import QueueAdmin

__all__ = ["QueueView"]


class QueueView(QueueAdmin[Any, Any], QueueLimits, QueueGroups[Any, Any]):
    """A queue on a shared, connected `QueueContext`; closing is its owner's business."""

    def __init__(self, ctx: QueueContext) -> None:
        self.keys = ctx.keys
        self.name = ctx.name
        self.ctx = ctx

    async def _context(self) -> QueueContext:
        return self.ctx

    async def get_job_schedulers(self) -> list[JobScheduler]:
        """Every scheduler of the queue, the next to run first."""
        return await scheduler.get_all(self.ctx)

    async def get_max_waiting(self) -> int | None:
        """The limit set by `Queue.set_max_waiting`, or None."""
        return await queue_limits.get_max_waiting(self.ctx)

    async def exists(self) -> bool:
        """Whether any of the queue's own keys exists (a queue that never had a job, a
        worker or a setting has none)."""
        k = self.keys
        names = [k.stream, k.meta, k.id, k.scheduled, k.completed, k.failed, k.dlq, k.events]
        names += [k.base + "schedulers", k.base + "workers"]
        found = await self.ctx.command(lambda c: c.exists(names))  # type: ignore[arg-type,unused-ignore]
        return int(found) > 0
