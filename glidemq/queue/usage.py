"""What queues and flows used: `Queue.get_usage_summary` and `Queue.get_flow_usage`, read
from the per-minute buckets and the flow's job hashes (the values are glidemq.options.usage)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import wire
from ..client.context import QueueContext
from ..errors import JobNotFoundError
from ..keys import QueueKeys
from ..options.usage import (
    SUMMARY_WINDOW,
    FlowUsage,
    ModelUsage,
    Usage,
    UsageSummary,
    UsageTotals,
    check_queues,
    check_since,
    combine,
    parse_usage,
    sum_usages,
    totals_from_fields,
)

__all__ = ["QueueUsage"]


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def _job_and_deps(
    ctx: QueueContext, job_key: str, deps_key: str
) -> tuple[dict[bytes, bytes], set[bytes]]:
    fields = await ctx.command(lambda c: c.hgetall(job_key))
    pending = await ctx.command(lambda c: c.smembers(deps_key))
    return dict(fields or {}), set(pending or ())


class QueueUsage:
    """Usage reports of a queue and of flows; part of `Queue`."""

    keys: QueueKeys

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    async def get_usage_summary(
        self, *, queues: Sequence[str] | None = None, since: int | None = None
    ) -> UsageSummary:
        """Usage reported to `queues` (default: this queue) since `since` (ms; default: the
        week of per-minute buckets kept): totals, per model and per queue."""
        ctx = await self._context()
        now = ctx.now_ms()
        first = check_since(since, now)
        names = check_queues(queues, self.keys.name)
        parts: dict[str, tuple[UsageTotals, dict[str, ModelUsage]]] = {}
        last = now // 60_000
        for name in names:
            index = QueueKeys(name, self.keys.prefix).base + "usage"
            fields: dict[str, float] = {}
            # A call sums at most SUMMARY_WINDOW buckets: a week in one call would hold the
            # server for a quarter of a second.
            for lo in range(first, last + 1, SUMMARY_WINDOW):
                hi = min(lo + SUMMARY_WINDOW - 1, last)
                for f, value in await wire.features.usage_summary(ctx, index, lo, hi):
                    fields[f] = fields.get(f, 0.0) + value
            parts[name] = totals_from_fields(fields)
        total, models = combine(list(parts.values()))
        return UsageSummary(total, models, {q: p[0] for q, p in parts.items()}, first * 60_000)

    async def get_flow_usage(self, parent_id: str) -> FlowUsage:
        """Usage summed over the flow tree under job `parent_id` of this queue (the job
        itself, its children, theirs, in whatever queue they live)."""
        ctx = await self._context()
        root = self.keys.job(parent_id)
        if not await ctx.command(lambda c: c.exists([root])):
            raise JobNotFoundError(self.keys.name, parent_id)
        seen: set[tuple[str, str]] = set()
        todo = [(self.keys.base, parent_id)]
        jobs: dict[str, Usage] = {}
        while todo:
            base, job_id = todo.pop()
            if (base, job_id) in seen:
                continue
            seen.add((base, job_id))
            job_key, deps_key = f"{base}job:{job_id}", f"{base}deps:{job_id}"
            fields, pending = await _job_and_deps(ctx, job_key, deps_key)
            refs = [k[3:] for k in fields if k[:3] in (b"cv:", b"cf:")]
            for ref in [*refs, *pending]:
                text = _text(ref)
                cut = text.rfind(":")
                if cut > 0:
                    todo.append((text[: cut + 1], text[cut + 1 :]))
            usage = parse_usage(fields.get(b"usage"))
            if usage is not None:
                queue = base[base.find("{") + 1 : base.rfind("}")]
                jobs[f"{queue}:{job_id}"] = usage
        return FlowUsage(sum_usages(list(jobs.values())), jobs)
