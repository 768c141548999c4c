"""Usage and cost of model calls: job.usage, a flow's usage, the usage summary by model and
by queue. The same on standalone Valkey, the cluster and in memory."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import FlowJob, JobNotFoundError, ValidationError
from tests.behaviour.conftest import Backend


async def _chat(job: Any) -> str:
    size = len(job.data)
    await job.report_usage(
        model=job.data,
        provider="fake",
        tokens={"input": size, "output": 2 * size},
        costs={"total": size / 100},
        latency_ms=size,
    )
    return "ok"


async def test_reported_usage_is_on_the_job_and_in_the_summary(backend: Backend) -> None:
    q = backend.queue
    jobs = [await q.add("chat", m) for m in ("tiny", "tiny", "larger")]
    async with backend.worker(_chat, concurrency=3):
        for j in jobs:
            assert await j.wait_until_finished(timeout=20) == "completed"
    fetched = await q.get_job(jobs[2].id)
    assert fetched.usage is not None
    assert fetched.usage.model == "larger" and fetched.usage.provider == "fake"
    assert fetched.usage.tokens == {"input": 6, "output": 12}
    assert fetched.usage.total_tokens == 18 and fetched.usage.calls == 1
    assert fetched.usage.total_cost == pytest.approx(0.06)
    summary = await q.get_usage_summary()
    assert summary.total.calls == 3
    assert summary.total.total_tokens == 3 * (4 + 4 + 6)
    assert summary.total.tokens == {"input": 14, "output": 28}
    assert summary.models["tiny"].calls == 2 and summary.models["tiny"].total_tokens == 24
    assert summary.models["larger"].total_cost == pytest.approx(0.06)
    assert summary.queues[q.name] == summary.total
    assert (await q.get_usage_summary(since=backend.now_ms() + 120_000)).total.calls == 0
    unused = await q.add("never", None)
    assert (await q.get_job(unused.id)).usage is None


async def test_flow_usage_sums_every_job_of_the_tree(backend: Backend) -> None:
    q, other = backend.queue, backend.other_queue()
    flows = backend.flow_producer()
    node = await flows.add(
        FlowJob(
            "chat",
            q.name,
            "root",
            children=[
                FlowJob("chat", other.name, "ab", children=[FlowJob("chat", q.name, "abc")]),
                FlowJob("chat", other.name, "abcd"),
            ],
        )
    )
    async with backend.worker(_chat), backend.worker_of(other.name, _chat):
        root = await q.get_job(node.job.id)
        assert await root.wait_until_finished(timeout=20) == "completed"
    flow = await q.get_flow_usage(node.job.id)
    assert len(flow.jobs) == 4
    assert flow.total.calls == 4
    assert flow.total.total_tokens == 3 * (4 + 2 + 3 + 4)
    assert flow.jobs[f"{other.name}:{node.children[1].job.id}"].total_tokens == 12
    with pytest.raises(JobNotFoundError):
        await q.get_flow_usage("missing")


async def test_bad_usage_is_refused_and_changes_nothing(backend: Backend) -> None:
    q = backend.queue
    job = await q.add("chat", None)
    for bad in ({"tokens": {"input": -1}}, {"costs": {"total": float("nan")}}, {"latency_ms": 1.5}):
        with pytest.raises(ValidationError):
            await job.report_usage(**bad)
    assert (await q.get_job(job.id)).usage is None
    assert (await q.get_usage_summary()).total.calls == 0
