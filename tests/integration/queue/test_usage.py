"""Usage and cost of model calls: Job.report_usage, job.usage, Queue.get_flow_usage and
Queue.get_usage_summary (per-minute buckets), standalone and cluster."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    FlowJob,
    FlowProducer,
    Job,
    JobNotFoundError,
    Queue,
    ValidationError,
    Worker,
)
from tests.helpers import FAST
from tests.integration.flows.test_flows import same_slot_names


async def test_report_usage_is_stored_on_the_job_and_summed_over_calls(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("chat", {"prompt": "hi"})
    reported: list[Any] = []

    async def process(j: Job[Any, Any]) -> str:
        reported.append(
            await j.report_usage(
                model="small",
                provider="fake",
                tokens={"input": 10, "output": 5},
                costs={"total": 0.25},
                latency_ms=30,
            )
        )
        reported.append(
            await j.report_usage(
                model="large", tokens={"input": 1, "output": 2}, costs={"total": 0.5}
            )
        )
        return "ok"

    async with Worker(queue.name, process, connection=conn, **FAST):
        assert await job.wait_until_finished(timeout=20) == "completed"
    usage = job.usage
    assert usage is not None
    assert usage == reported[-1]
    assert usage.model == "large" and usage.provider == "fake"
    assert usage.calls == 2 and usage.latency_ms == 30
    assert usage.tokens == {"input": 11, "output": 7}
    assert usage.total_tokens == 18
    assert usage.total_cost == pytest.approx(0.75)
    fetched = await queue.get_job(job.id)
    assert fetched is not None and fetched.usage == usage


async def test_usage_summary_reads_buckets_by_model_and_by_queue(
    conn: ConnectionOptions, queue_name: str
) -> None:
    names = [f"{queue_name}-a", f"{queue_name}-b"]
    qs: list[Queue[Any, Any]] = [Queue(n, connection=conn) for n in names]
    try:
        jobs = [await q.add("j", i) for i, q in enumerate(qs) for _ in range(2)]
        for i, j in enumerate(jobs):
            await j.report_usage(
                model="m1" if i % 2 else "m2",
                tokens={"input": 100, "output": 10 * (i + 1)},
                costs={"input": 0.5, "output": 0.25},
            )
        summary = await qs[0].get_usage_summary(queues=names)
        assert summary.total.calls == 4
        assert summary.total.total_tokens == 400 + 10 + 20 + 30 + 40
        assert summary.total.tokens == {"input": 400, "output": 100}
        assert summary.total.total_cost == pytest.approx(3.0)
        assert summary.total.costs == pytest.approx({"input": 2.0, "output": 1.0})
        assert summary.models["m2"].calls == 2 and summary.models["m1"].calls == 2
        assert summary.models["m2"].total_tokens == 200 + 10 + 30
        assert set(summary.queues) == set(names)
        assert summary.queues[names[0]].total_tokens == 200 + 10 + 20
        assert summary.queues[names[1]].calls == 2
        own = await qs[1].get_usage_summary()
        assert own.total == summary.queues[names[1]]
        later = await qs[0].get_usage_summary(queues=names, since=2**41)
        assert later.total.calls == 0 and later.models == {}
    finally:
        for q in qs:
            await q.obliterate(force=True)
            await q.close()


async def test_flow_usage_sums_the_tree(conn: ConnectionOptions, queue_name: str) -> None:
    names = same_slot_names(queue_name, 2)
    qs: list[Queue[Any, Any]] = [Queue(n, connection=conn) for n in names]
    try:
        async with FlowProducer(connection=conn) as flows:
            node = await flows.add(
                FlowJob(
                    "root",
                    names[0],
                    None,
                    children=[
                        FlowJob("mid", names[1], None, children=[FlowJob("leaf", names[0], 1)]),
                        FlowJob("leaf2", names[1], 2),
                    ],
                )
            )
            leaf = node.children[0].children[0].job
            # reported before it runs (through the producer's connection): counted as well
            await leaf.report_usage(model="m", tokens={"input": 5}, costs={"total": 1.5})
        n_tokens = {"root": 1, "mid": 10, "leaf": 100, "leaf2": 1000}

        async def process(j: Job[Any, Any]) -> None:
            await j.report_usage(model="m", tokens={"output": n_tokens[j.name]})

        async with (
            Worker(names[0], process, connection=conn, **FAST),
            Worker(names[1], process, connection=conn, **FAST),
        ):
            root = await qs[0].get_job(node.job.id)
            assert root is not None
            assert await root.wait_until_finished(timeout=20) == "completed"
        flow = await qs[0].get_flow_usage(node.job.id)
        assert flow.total.total_tokens == 1111 + 5
        assert flow.total.calls == 5
        assert flow.total.total_cost == pytest.approx(1.5)
        assert flow.jobs[f"{names[0]}:{leaf.id}"].tokens == {"input": 5, "output": 100}
        assert len(flow.jobs) == 4
        with pytest.raises(JobNotFoundError):
            await qs[0].get_flow_usage("no-such-job")
    finally:
        for q in qs:
            await q.obliterate(force=True)
            await q.close()


async def test_report_usage_bad_input_is_refused_before_any_write(
    queue: Queue[Any, Any],
) -> None:
    job = await queue.add("j", None)
    bad: list[dict[str, Any]] = [
        {"tokens": {"input": -1}},
        {"tokens": {"input": 1.5}},
        {"tokens": {"": 1}},
        {"tokens": {"a|b": 1}},
        {"tokens": [1]},
        {"costs": {"total": float("nan")}},
        {"costs": {"total": float("inf")}},
        {"costs": {"total": -0.1}},
        {"latency_ms": -5},
        {"latency_ms": True},
        {"model": 3},
    ]
    for kwargs in bad:
        with pytest.raises(ValidationError):
            await job.report_usage(**kwargs)
    fetched = await queue.get_job(job.id)
    assert fetched is not None and fetched.usage is None
    summary = await queue.get_usage_summary()
    assert summary.total.calls == 0
    with pytest.raises(ValidationError):
        await queue.get_usage_summary(since=-1)
    with pytest.raises(ValidationError):
        await queue.get_usage_summary(queues="one-name")
    await job.remove()
    with pytest.raises(JobNotFoundError):
        await job.report_usage(tokens={"input": 1})
    assert (await queue.get_usage_summary()).total.calls == 0
