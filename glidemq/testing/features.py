"""The AI-native methods of TestQueue: usage, flow budgets, suspend and signal, job streams
(the same as Queue's), on an in-memory queue."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..budget import FlowBudget, check_budget
from ..errors import JobNotFoundError
from ..streams import StreamChunk
from ..suspend import encode_signal
from ..usage import FlowUsage, UsageSummary
from . import budgets, streams, suspend, usage
from .bulk import redis_range
from .job import TestJob
from .store import QueueStore

__all__ = ["AiFeatureMethods"]


class AiFeatureMethods:
    """Usage, budgets, suspend/signal and streams of TestQueue."""

    name: str

    async def _ready(self) -> QueueStore:
        raise NotImplementedError

    async def get_usage_summary(
        self, *, queues: Sequence[str] | None = None, since: int | None = None
    ) -> UsageSummary:
        """Usage reported to `queues` (default: this queue) since `since` (ms)."""
        return usage.summary(await self._ready(), queues, since)

    async def get_flow_usage(self, parent_id: str) -> FlowUsage:
        """Usage summed over the flow tree under job `parent_id` of this queue."""
        return usage.flow_usage(await self._ready(), parent_id)

    async def get_flow_budget(self, root_id: str) -> FlowBudget | None:
        """The budget of the flow rooted at job `root_id` (see `glidemq.Queue`)."""
        b = (await self._ready()).budgets.get(root_id)
        return None if b is None else b.view()

    async def set_flow_budget(
        self,
        root_id: str,
        *,
        max_total_tokens: int | None = None,
        max_total_cost: float | None = None,
        on_exceeded: str = "fail",
    ) -> int:
        """Replace a flow's budget; parked jobs go back when it fits (see `glidemq.Queue`)."""
        raw: dict[str, Any] = {"on_exceeded": on_exceeded}
        if max_total_tokens is not None:
            raw["max_total_tokens"] = max_total_tokens
        if max_total_cost is not None:
            raw["max_total_cost"] = max_total_cost
        tokens, cost, mode = check_budget(raw)
        store = await self._ready()
        b = store.budgets.get(root_id)
        if b is None:
            raise JobNotFoundError(self.name, root_id)
        return budgets.release(store, b, tokens, cost, mode, store.clock.now_ms())

    async def signal(self, job_id: str, name: str, data: Any = None) -> str:
        """Wake suspended job `job_id` with a signal (see `glidemq.Queue.signal`)."""
        raw = encode_signal(name, data)
        store = await self._ready()
        return suspend.signal(store, job_id, name, raw, store.clock.now_ms())

    async def get_suspended(self, start: int = 0, end: int = -1) -> list[TestJob[Any, Any]]:
        """Suspended jobs, the first deadline first; expired ones are failed first."""
        store = await self._ready()
        store.expire_suspended(store.clock.now_ms())
        order = sorted(store.suspended.items(), key=lambda kv: (kv[1], kv[0]))
        ids = redis_range([i for i, _ in order], start, end)
        return [TestJob.from_record(store, store.jobs[i]) for i in ids if i in store.jobs]

    async def get_suspended_count(self) -> int:
        """How many jobs are suspended."""
        return len((await self._ready()).suspended)

    async def read_stream(
        self, job_id: str, last_id: str | None = None, block_ms: int | None = None
    ) -> list[StreamChunk]:
        """Chunks of job `job_id` after `last_id`; with `block_ms`, waits for one."""
        return await streams.read(await self._ready(), job_id, last_id, block_ms)

    async def stream_job(
        self, job_id: str, *, last_id: str | None = None, block_ms: int = 1000
    ) -> AsyncIterator[Any]:
        """Follow job `job_id`'s stream until the job finished and every chunk was read."""
        async for chunk in streams.follow(await self._ready(), job_id, last_id, block_ms):
            yield chunk.data

    async def follow_stream(
        self, job_id: str, *, last_id: str | None = None, block_ms: int = 1000
    ) -> AsyncIterator[StreamChunk]:
        """As `stream_job`, but yields each `StreamChunk` (its id too, to resume after)."""
        async for chunk in streams.follow(await self._ready(), job_id, last_id, block_ms):
            yield chunk
