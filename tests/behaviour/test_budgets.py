"""Budget caps on flows, the same on every engine: a report that passes the cap lets the
reporting job finish; later jobs of the flow fail (fail) or wait until the budget is raised
(pause)."""

from __future__ import annotations

from typing import Any

from glidemq import FlowJob, Job
from tests.behaviour.conftest import Backend
from tests.helpers import wait_state


async def _spend(job: Job[Any, Any]) -> str:
    if job.name == "draft":
        await job.report_usage(
            model="fake", tokens={"input": 900, "output": 300}, costs={"total": 2}
        )
    return job.name


def _flow(name: str) -> FlowJob:
    return FlowJob("publish", name, children=[FlowJob("draft", name)])


async def test_fail_budget_fails_the_rest_of_the_flow_after_the_cap_passed(
    backend: Backend,
) -> None:
    q = backend.queue
    node = await backend.flow_producer().add(_flow(q.name), budget={"max_total_tokens": 1000})
    async with backend.worker(_spend):
        root = await wait_state(q, node.job.id, "failed")
    assert root.failed_reason == "budget exceeded: total tokens 1200 > cap 1000"
    draft = await q.get_job(node.children[0].job.id)
    assert draft is not None and draft.state == "completed"
    budget = await q.get_flow_budget(node.job.id)
    assert budget is not None and budget.total_tokens == 1200 and budget.total_cost == 2


async def test_pause_budget_parks_the_flow_until_set_flow_budget_raises_the_cap(
    backend: Backend,
) -> None:
    q = backend.queue
    node = await backend.flow_producer().add(
        _flow(q.name), budget={"max_total_cost": 1.5, "on_exceeded": "pause"}
    )
    async with backend.worker(_spend):
        await wait_state(q, node.job.id, "suspended")
        budget = await q.get_flow_budget(node.job.id)
        assert budget is not None and budget.exceeded == "budget exceeded: total cost 2 > cap 1.5"
        released = await q.set_flow_budget(node.job.id, max_total_cost=10, on_exceeded="pause")
        assert released == 1
        root = await wait_state(q, node.job.id, "completed")
    assert root.returnvalue == "publish"
