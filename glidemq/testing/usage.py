"""Usage reports in memory: what wire.features.report_usage and usage_summary do, for
TestJob.report_usage and TestQueue's usage queries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import JobNotFoundError
from ..usage import (
    FlowUsage,
    ModelUsage,
    TokenLimiter,
    Usage,
    UsageSummary,
    UsageTotals,
    _total,
    bucket_add,
    check_queues,
    check_since,
    combine,
    merge_usage,
    sum_usages,
    totals_from_fields,
)
from . import budgets
from .store import QueueStore

__all__ = ["flow_usage", "report", "summary"]


def report(
    store: QueueStore,
    job_id: str,
    model: str,
    provider: str,
    tokens: Mapping[str, int],
    costs: Mapping[str, float],
    latency_ms: int,
    limiter: TokenLimiter | None = None,
) -> Usage:
    """Add one report to the job, to the bucket of the current minute and (with a limiter)
    to the token window."""
    rec = store.jobs.get(job_id)
    if rec is None:
        raise JobNotFoundError(store.name, job_id)
    rec.usage = merge_usage(rec.usage, model, provider, tokens, costs, latency_ms)
    minute = store.clock.now_ms() // 60_000
    bucket = store.usage_buckets.setdefault(minute, {})
    bucket_add(bucket, model or (rec.usage.model or ""), tokens, costs)
    if rec.budget is not None:
        budgets.charge(rec.budget, int(_total(tokens)), float(_total(costs)))
    if limiter is not None:
        _charge(store, limiter, int(_total(tokens)), store.clock.now_ms())
    return rec.usage


def _charge(store: QueueStore, limiter: TokenLimiter, tokens: int, now: int) -> None:
    start, used = store.token_window
    if now >= start + limiter.duration_ms:
        start, used = now, 0
    used += tokens
    store.token_window = (start, used)
    if used >= limiter.max_tokens:
        store.limit_until = max(store.limit_until, start + limiter.duration_ms)


def summary(store: QueueStore, queues: Sequence[str] | None, since: int | None) -> UsageSummary:
    """The buckets of `queues` (default: this one) from `since` on, summed."""
    now = store.clock.now_ms()
    first = check_since(since, now)
    parts: dict[str, tuple[UsageTotals, dict[str, ModelUsage]]] = {}
    for name in check_queues(queues, store.name):
        fields: dict[str, float] = {}
        for minute, bucket in store.peer(name).usage_buckets.items():
            if first <= minute <= now // 60_000:
                for f, v in bucket.items():
                    fields[f] = fields.get(f, 0) + v
        parts[name] = totals_from_fields(fields)
    total, models = combine(list(parts.values()))
    return UsageSummary(total, models, {q: p[0] for q, p in parts.items()}, first * 60_000)


def flow_usage(store: QueueStore, parent_id: str) -> FlowUsage:
    """Usage summed over the flow tree under `parent_id`."""
    if parent_id not in store.jobs:
        raise JobNotFoundError(store.name, parent_id)
    seen: set[tuple[str, str]] = set()
    todo = [(store.name, parent_id)]
    jobs: dict[str, Usage] = {}
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        rec = store.peer(ref[0]).jobs.get(ref[1])
        if rec is None:
            continue
        todo += list(rec.deps)
        for key in [*rec.children_values, *rec.ignored_failures]:
            queue, _, job_id = key.rpartition(":")
            todo.append((queue, job_id))
        if rec.usage is not None:
            jobs[f"{ref[0]}:{ref[1]}"] = rec.usage
    return FlowUsage(sum_usages(list(jobs.values())), jobs)
