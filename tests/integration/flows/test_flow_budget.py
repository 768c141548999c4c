"""Budget caps on flows: FlowProducer.add(budget=...), the fail and pause modes at fetch,
and Queue.set_flow_budget releasing paused jobs, standalone and cluster."""

from __future__ import annotations

import asyncio
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
from tests.helpers import FAST, wait_state


async def _finish(queue: Queue[Any, Any], job_id: str) -> str:
    """How the job ends (waited for through the queue's own client)."""
    job = await queue.get_job(job_id)
    assert job is not None
    return await job.wait_until_finished(timeout=20)


def _flow(queue: str) -> FlowJob:
    return FlowJob(
        "root",
        queue,
        children=[FlowJob("a", queue, data=1), FlowJob("b", queue, data=2)],
    )


async def test_fail_budget_fails_jobs_of_the_flow_fetched_after_the_cap_passed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with FlowProducer(connection=conn) as fp:
        node = await fp.add(_flow(queue.name), budget={"max_total_tokens": 10})
        a, b = node.children[0].job, node.children[1].job
        await a.report_usage(model="m", tokens={"input": 6, "output": 5})
    budget = await queue.get_flow_budget(node.job.id)
    assert budget is not None
    assert budget.total_tokens == 11 and budget.max_total_tokens == 10
    reason = "budget exceeded: total tokens 11 > cap 10"
    assert budget.exceeded == reason
    ran: list[str] = []

    async def process(j: Job[Any, Any]) -> str:
        ran.append(j.name)
        return "ok"

    async with Worker(queue.name, process, connection=conn, **FAST):
        assert await _finish(queue, node.job.id) == "failed"
        # The parent fails with its first failed child; the worker fetches the other next.
        for job in (a, b):
            got = await wait_state(queue, job.id, "failed")
            assert got.failed_reason == reason
    assert ran == []


async def test_a_job_that_passes_the_cap_finishes_its_try_and_the_rest_fail(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    flow = FlowJob("root", queue.name, children=[FlowJob("spend", queue.name)])
    async with FlowProducer(connection=conn) as fp:
        node = await fp.add(flow, budget={"max_total_cost": 1.0, "on_exceeded": "fail"})

    async def process(j: Job[Any, Any]) -> str:
        await j.report_usage(model="m", tokens={"input": 1}, costs={"total": 1.5})
        return "spent"

    async with Worker(queue.name, process, connection=conn, **FAST):
        assert await _finish(queue, node.job.id) == "failed"
    child = await queue.get_job(node.children[0].job.id)
    assert child is not None and child.state == "completed"
    root = await queue.get_job(node.job.id)
    assert root is not None and root.failed_reason == "budget exceeded: total cost 1.5 > cap 1"


async def test_pause_budget_parks_jobs_until_set_flow_budget_raises_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with FlowProducer(connection=conn) as fp:
        node = await fp.add(
            _flow(queue.name), budget={"max_total_tokens": 10, "on_exceeded": "pause"}
        )
        a, b = node.children[0].job, node.children[1].job
        await a.report_usage(tokens={"input": 11})

    async def process(j: Job[Any, Any]) -> str:
        return j.name

    async with Worker(queue.name, process, connection=conn, **FAST):
        for _ in range(200):
            got = [await queue.get_job(x.id) for x in (a, b)]
            if all(g is not None and g.state == "suspended" for g in got):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"children not parked: {[g.state if g else None for g in got]}")
        # still within the cap: nothing is released
        assert (
            await queue.set_flow_budget(node.job.id, max_total_tokens=10, on_exceeded="pause") == 0
        )
        assert (
            await queue.set_flow_budget(node.job.id, max_total_tokens=100, on_exceeded="pause") == 2
        )
        assert await _finish(queue, node.job.id) == "completed"
    budget = await queue.get_flow_budget(node.job.id)
    assert budget is not None and budget.exceeded is None and budget.max_total_tokens == 100


async def test_budget_is_validated_before_anything_is_written(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    bad: list[tuple[Any, str]] = [
        ({"max_total_tokens": -1}, "budget.max_total_tokens"),
        ({"max_total_tokens": True}, "budget.max_total_tokens"),
        ({"max_total_cost": float("nan")}, "budget.max_total_cost"),
        ({"max_total_tokens": 5, "on_exceeded": "stop"}, "budget.on_exceeded"),
        ({"max_tokens": 5}, "budget.max_tokens"),
        ({}, "budget"),
        ([1], "budget"),
    ]
    async with FlowProducer(connection=conn) as fp:
        for budget, field in bad:
            with pytest.raises(ValidationError) as info:
                await fp.add(_flow(queue.name), budget=budget)
            assert info.value.field == field
    assert (await queue.get_job_counts()).waiting == 0
    with pytest.raises(JobNotFoundError):
        await queue.set_flow_budget("nope", max_total_tokens=5)
    with pytest.raises(ValidationError):
        await queue.set_flow_budget("x", on_exceeded="pause")
    assert await queue.get_flow_budget("nope") is None
