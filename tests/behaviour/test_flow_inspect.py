"""Inspecting and steering flows: get_flow (tree and DAG), a job's parents and dependencies,
and the continue_parent_on_failure policy. The same on standalone Valkey, the cluster and
in memory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import DagNode, FlowJob, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state


async def _count(job: Any) -> Any:
    if job.name == "flaky":
        raise RuntimeError("upstream down")
    if job.name == "report":
        return sum((await job.get_children_values()).values())
    return len(str(job.data).split())


async def test_get_flow_returns_the_tree_with_states_results_and_children(
    backend: Backend,
) -> None:
    q, other = backend.queue, backend.other_queue()
    node = await backend.flow_producer().add(
        FlowJob(
            "report",
            q.name,
            children=[
                FlowJob("count", other.name, "one two"),
                FlowJob(
                    "report",
                    q.name,
                    children=[FlowJob("count", q.name, "a b c", {"remove_on_complete": True})],
                ),
            ],
        )
    )
    root_id = node.job.id
    words, sub = node.children
    leaf = sub.children[0]
    before = await q.get_flow(root_id)
    assert before is not None and before.root.state == "waiting-children"
    kids = {c.key: c for c in before.root.children}
    assert set(kids) == {f"{other.name}:{words.job.id}", f"{q.name}:{sub.job.id}"}
    assert kids[f"{q.name}:{sub.job.id}"].state == "waiting-children"
    assert [c.state for c in kids[f"{q.name}:{sub.job.id}"].children] == ["waiting"]
    async with backend.worker(_count, concurrency=2), backend.worker_of(other.name, _count):
        await wait_state(q, root_id, "completed")
    flow = await q.get_flow(root_id)
    assert flow is not None and not flow.truncated
    assert flow.root.state == "completed" and flow.root.returnvalue == 5
    assert len(flow.nodes) == 4 and len(flow.edges) == 3
    gone = flow.nodes[f"{q.name}:{leaf.job.id}"]
    # removed on completion: still shown, with the value its parent recorded
    assert not gone.exists and gone.state == "completed" and gone.returnvalue == 3
    assert flow.nodes[f"{other.name}:{words.job.id}"].returnvalue == 2
    assert (f"{q.name}:{sub.job.id}", gone.key) in flow.edges
    assert await q.get_flow("no-such-job") is None
    with pytest.raises(ValidationError):
        await q.get_flow(root_id, max_nodes=0)
    small = await q.get_flow(root_id, max_nodes=2)
    assert small is not None and small.truncated and len(small.nodes) == 2


async def test_get_flow_shows_a_shared_dag_node_once_and_parents_list_all(
    backend: Backend,
) -> None:
    q = backend.queue
    jobs = await backend.flow_producer().add_dag(
        [
            DagNode("package", q.name, depends_on=["lint", "test"]),
            DagNode("lint", q.name, depends_on=["checkout"]),
            DagNode("test", q.name, depends_on=["checkout"]),
            DagNode("checkout", q.name, "x"),
        ]
    )
    checkout = await q.get_job(jobs["checkout"].id)
    assert checkout is not None
    parents = await checkout.get_parents()
    assert sorted(parents) == sorted([(q.name, jobs["lint"].id), (q.name, jobs["test"].id)])
    root = await q.get_job(jobs["package"].id)
    assert root is not None and await root.get_parents() == []
    flow = await q.get_flow(jobs["package"].id)
    assert flow is not None and len(flow.nodes) == 4
    shared = flow.nodes[f"{q.name}:{jobs['checkout'].id}"]
    lint, test = (flow.nodes[f"{q.name}:{jobs[n].id}"] for n in ("lint", "test"))
    assert lint.children == [shared] and test.children[0] is shared
    assert sorted(e for e in flow.edges if e[1] == shared.key) == sorted(
        [(lint.key, shared.key), (test.key, shared.key)]
    )


async def test_get_dependencies_lists_and_counts_processed_and_pending_children(
    backend: Backend,
) -> None:
    q = backend.queue
    node = await backend.flow_producer().add(
        FlowJob(
            "report",
            q.name,
            children=[
                FlowJob("count", q.name, "a b"),
                FlowJob("flaky", q.name, opts={"ignore_dependency_on_failure": True}),
                FlowJob("count", q.name, "c", {"delay": 3_600_000}),
            ],
        )
    )
    ok, bad, late = (c.job.id for c in node.children)
    async with backend.worker(_count) as worker:
        await wait_for(lambda: worker.completed_count + worker.failed_count == 2)
    parent = await q.get_job(node.job.id)
    assert parent is not None
    deps = await parent.get_dependencies()
    assert deps.processed == {f"{q.name}:{ok}": 2}
    assert deps.failed == {f"{q.name}:{bad}": "upstream down"}
    assert deps.unprocessed == [f"{q.name}:{late}"]
    assert (deps.processed_count, deps.failed_count, deps.unprocessed_count) == (1, 1, 1)
    counts = await parent.get_dependencies(processed=False, unprocessed=False)
    assert counts.processed == {} and counts.unprocessed == []
    assert (counts.processed_count, counts.unprocessed_count) == (1, 1)


async def test_continue_parent_on_failure_runs_the_parent_at_once_with_the_failure(
    backend: Backend,
) -> None:
    q = backend.queue
    gate = asyncio.Event()
    seen: dict[str, Any] = {}

    async def process(job: Any) -> Any:
        if job.name == "flaky":
            raise RuntimeError("upstream down")
        if job.name == "slow":
            await gate.wait()
            return "late"
        seen["failures"] = await job.get_children_failures()
        seen["pending"] = (await job.get_dependencies()).unprocessed_count
        return "partial"

    node = await backend.flow_producer().add(
        FlowJob(
            "summary",
            q.name,
            children=[
                FlowJob("flaky", q.name, opts={"continue_parent_on_failure": True}),
                FlowJob("slow", q.name),
            ],
        )
    )
    flaky, slow = (c.job.id for c in node.children)
    async with backend.worker(process, concurrency=4):
        done = await wait_state(q, node.job.id, "completed")  # while "slow" still runs
        assert seen == {"failures": {f"{q.name}:{flaky}": "upstream down"}, "pending": 1}
        assert done.returnvalue == "partial"
        gate.set()
        await wait_state(q, slow, "completed")
    parent = await q.get_job(node.job.id)
    assert parent is not None
    assert await parent.get_children_values() == {f"{q.name}:{slow}": "late"}


async def test_child_failure_policies_are_exclusive(backend: Backend) -> None:
    with pytest.raises(ValidationError) as info:
        await backend.queue.add(
            "x",
            None,
            {"ignore_dependency_on_failure": True, "continue_parent_on_failure": True},
        )
    assert info.value.field == "continue_parent_on_failure"


async def test_a_parent_failed_by_a_child_lists_that_child_everywhere(backend: Backend) -> None:
    q = backend.queue
    node = await backend.flow_producer().add(
        FlowJob(
            "report", q.name, children=[FlowJob("count", q.name, "a b"), FlowJob("flaky", q.name)]
        )
    )
    ok, bad = (f"{q.name}:{c.job.id}" for c in node.children)
    async with backend.worker(_count, concurrency=2):
        await wait_state(q, node.job.id, "failed")
    parent = await q.get_job(node.job.id)
    assert parent is not None
    deps = await parent.get_dependencies()
    assert deps.processed == {ok: 2}
    assert deps.failed == {bad: "upstream down"} and deps.failed_count == 1
    assert await parent.get_children_failures() == {bad: "upstream down"}
    assert await parent.get_ignored_children_failures() == {}  # it was not ignored
    flow = await q.get_flow(node.job.id)
    assert flow is not None
    kids = {c.key: c for c in flow.root.children}
    assert set(kids) == {ok, bad}
    assert kids[bad].state == "failed" and kids[bad].failed_reason == "upstream down"
