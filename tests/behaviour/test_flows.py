"""Flows: parents wait for their children, read their values, fail with them (unless the
child's policy says otherwise), wait for children added while running; DAGs and chains.
The same on standalone Valkey, the cluster and in memory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import (
    CycleError,
    DagNode,
    DuplicateJobError,
    FlowJob,
    JobStateError,
    ValidationError,
    chain,
)
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state


async def _process(job: Any) -> Any:
    if job.name == "flaky":
        raise RuntimeError("upstream down")
    if job.name in ("report", "summary"):
        values = await job.get_children_values()
        if job.name == "summary":
            return {"values": values, "ignored": await job.get_ignored_children_failures()}
        return sum(values.values())
    return len(str(job.data).split())


async def test_a_parent_runs_after_its_children_and_reads_their_values(
    backend: Backend,
) -> None:
    q, other = backend.queue, backend.other_queue()
    flows = backend.flow_producer()
    node = await flows.add(
        FlowJob(
            "report",
            q.name,
            children=[
                FlowJob("count", other.name, "one two three"),
                FlowJob("count", q.name, "four five"),
            ],
        )
    )
    assert node.job.state == "waiting-children"
    assert [c.job.state for c in node.children] == ["waiting", "waiting"]
    assert (await q.get_job_counts()).waiting_children == 1
    assert [j.id for j in await q.get_jobs("waiting-children")] == [node.job.id]
    child = await other.get_job(node.children[0].job.id)
    assert child is not None and child.parent_id == node.job.id
    async with backend.worker(_process), backend.worker_of(other.name, _process):
        parent = await wait_state(q, node.job.id, "completed")
    assert parent.returnvalue == 5
    first, second = node.children
    assert await parent.get_children_values() == {
        f"{other.name}:{first.job.id}": 3,
        f"{q.name}:{second.job.id}": 2,
    }


async def test_a_flow_given_as_a_mapping_is_the_same_flow(backend: Backend) -> None:
    q, other = backend.queue, backend.other_queue()
    flows = backend.flow_producer()
    shared = {"name": "count", "queue_name": other.name, "data": "one two three"}
    node = await flows.add(
        {
            "name": "report",
            "queue_name": q.name,
            "children": [
                shared,
                {"name": "count", "queue_name": q.name, "data": "four five", "opts": {}},
            ],
        }
    )
    assert node.job.state == "waiting-children" and len(node.children) == 2
    [bulk] = await flows.add_bulk([{"name": "lone", "queue_name": q.name}])
    assert bulk is not None and bulk.job.name == "lone"
    async with backend.worker(_process), backend.worker_of(other.name, _process):
        parent = await wait_state(q, node.job.id, "completed")
    assert parent.returnvalue == 5


@pytest.mark.parametrize("flow", [42, "report", ["report", "q"], None])
async def test_a_flow_of_another_type_is_a_type_error_naming_the_expected_one(
    backend: Backend, flow: Any
) -> None:
    with pytest.raises(TypeError, match="expected a FlowJob or a mapping"):
        await backend.flow_producer().add(flow)


async def test_a_mapping_that_does_not_fit_names_the_place(backend: Backend) -> None:
    flows = backend.flow_producer()
    q = backend.queue.name
    with pytest.raises(ValidationError, match=r"flow\.children\[0\]\.queueName.*queue_name"):
        await flows.add({"name": "p", "queue_name": q, "children": [{"name": "c", "queueName": q}]})
    with pytest.raises(ValidationError, match=r"flow\.queue_name"):
        await flows.add({"name": "p"})
    with pytest.raises(TypeError, match=r"flow\.children\[1\]: expected a FlowJob"):
        await flows.add({"name": "p", "queue_name": q, "children": [FlowJob("c", q), 7]})
    assert (await backend.queue.get_job_counts()).waiting == 0  # nothing was written


async def test_a_failed_child_fails_its_parent_unless_its_failure_is_ignored(
    backend: Backend,
) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    strict = await flows.add(FlowJob("summary", q.name, children=[FlowJob("flaky", q.name)]))
    lenient = await flows.add(
        FlowJob(
            "summary",
            q.name,
            children=[
                FlowJob("flaky", q.name, opts={"ignore_dependency_on_failure": True}),
                FlowJob("steady", q.name, "a b"),
                FlowJob("flaky", q.name, opts={"remove_dependency_on_failure": True}),
            ],
        )
    )
    async with backend.worker(_process, concurrency=4):
        failed = await wait_state(q, strict.job.id, "failed")
        done = await wait_state(q, lenient.job.id, "completed")
    assert failed.failed_reason == (
        f"child glide:{{{q.name}}}:{strict.children[0].job.id} failed: upstream down"
    )
    flaky, steady, _ = (f"{q.name}:{c.job.id}" for c in lenient.children)
    assert done.returnvalue == {"values": {steady: 2}, "ignored": {flaky: "upstream down"}}


async def test_a_parent_failed_by_a_child_keeps_what_its_own_remove_on_fail_says(
    backend: Backend,
) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    dropped = await flows.add(
        FlowJob(
            "summary", q.name, opts={"remove_on_fail": True}, children=[FlowJob("flaky", q.name)]
        )
    )
    kept = await flows.add(FlowJob("summary", q.name, children=[FlowJob("flaky", q.name)]))
    async with backend.worker(_process, concurrency=4):
        await wait_state(q, kept.job.id, "failed")

        async def dropped_gone() -> bool:
            return await q.get_job(dropped.job.id) is None

        await wait_for(dropped_gone)
    assert [j.id for j in await q.get_jobs("failed") if j.name == "summary"] == [kept.job.id]


async def test_a_running_job_waits_for_children_it_adds(backend: Backend) -> None:
    q = backend.queue
    flows = backend.flow_producer()

    async def crawl(job: Any) -> Any:
        if job.name == "page":
            return f"fetched {job.data}"
        if not job.data.get("queued"):
            for url in job.data["urls"]:
                await flows.add(FlowJob("page", q.name, url), parent=job)
            await job.update_data({**job.data, "queued": True})
            await job.move_to_waiting_children()  # raises: this run ends here
        await job.move_to_waiting_children()  # nothing pending: returns
        return sorted((await job.get_children_values()).values())

    site = await q.add("site", {"urls": ["/a", "/b"]})
    assert site is not None
    async with backend.worker(crawl, concurrency=4):
        done = await wait_state(q, site.id, "completed")
    assert done.returnvalue == ["fetched /a", "fetched /b"]
    assert done.attempts_made == 0


async def test_dags_run_each_node_once_and_chains_in_sequence(backend: Backend) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    runs: list[str] = []

    async def build(job: Any) -> Any:
        runs.append(job.name)
        inputs = sorted((await job.get_children_values()).values())
        if job.name == "add":
            return sum(inputs) + job.data
        return f"{job.name}({','.join(inputs)})"

    jobs = await flows.add_dag(
        [
            DagNode("package", q.name, depends_on=["lint", "test"]),
            DagNode("lint", q.name, depends_on=["checkout"]),
            DagNode("test", q.name, depends_on=["checkout"]),
            DagNode("checkout", q.name),
        ]
    )
    steps = await flows.add(chain([FlowJob("add", q.name, n) for n in (1, 2, 3)]))
    async with backend.worker(build, concurrency=4):
        package = await wait_state(q, jobs["package"].id, "completed")
        total = await wait_state(q, steps.job.id, "completed")
    assert package.returnvalue == "package(lint(checkout()),test(checkout()))"
    assert runs.count("checkout") == 1
    assert total.returnvalue == 6


async def test_add_dependency_links_existing_jobs_and_refuses_cycles(backend: Backend) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    parent = await q.add("report", None)
    child = await q.add("count", "x y")
    assert parent is not None and child is not None
    assert await flows.add_dependency(parent, child) == "added"
    assert await flows.add_dependency((q.name, parent.id), child) == "exists"
    held = await q.get_job(parent.id)
    assert held is not None and held.state == "waiting-children"
    with pytest.raises(CycleError):
        await flows.add_dependency(child, parent)
    async with backend.worker(_process):
        done = await wait_state(q, parent.id, "completed")
    assert done.returnvalue == 2
    with pytest.raises(JobStateError):
        await flows.add_dependency(parent, child)  # the parent finished


async def test_a_taken_custom_id_refuses_the_whole_flow(backend: Backend) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    assert await q.add("x", None, {"job_id": "taken"}) is not None
    with pytest.raises(DuplicateJobError):
        await flows.add(
            FlowJob("p", q.name, children=[FlowJob("c", q.name, opts={"job_id": "taken"})])
        )
    counts = await q.get_job_counts()
    assert (counts.waiting, counts.waiting_children) == (1, 0)
    nodes = await flows.add_bulk(
        [
            FlowJob("p", q.name, opts={"job_id": "taken"}),
            FlowJob("p", q.name, children=[FlowJob("c", q.name)]),
        ]
    )
    assert nodes[0] is None and nodes[1] is not None
    assert nodes[1].job.state == "waiting-children"


async def test_a_removed_child_drops_the_dependency_and_a_parent_delay_counts_from_then(
    backend: Backend,
) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    node = await flows.add(
        FlowJob(
            "report",
            q.name,
            opts={"delay": 2000},
            children=[FlowJob("count", q.name, "a b c"), FlowJob("count", q.name, "x")],
        )
    )
    gone, kept = node.children
    await q.remove(gone.job.id)
    assert await node.job.get_state() == "waiting-children"  # one child still pending
    reader = backend.queue_events()
    await reader.start()
    async with backend.worker(_process):
        await wait_state(q, kept.job.id, "completed")
        parent = await wait_state(q, node.job.id, "delayed")
        event = await asyncio.wait_for(_event(reader, "delayed", node.job.id), 10)
        assert event.get("reason") == "children"
        await backend.elapse(2000)
        done = await wait_state(q, node.job.id, "completed")
    assert parent.state == "delayed"
    assert done.returnvalue == 1
    assert await done.get_children_values() == {f"{q.name}:{kept.job.id}": 1}


async def _event(reader: Any, name: str, job_id: str) -> dict[str, Any]:
    async for event in reader:
        if event.event == name and event.job_id == job_id:
            return dict(event.fields)
    raise AssertionError("the events ended")


async def test_a_revoked_parent_fails_and_its_children_run_on(backend: Backend) -> None:
    q = backend.queue
    flows = backend.flow_producer()
    node = await flows.add(FlowJob("report", q.name, children=[FlowJob("count", q.name, "a")]))
    assert await q.revoke(node.job.id) == "revoked"
    async with backend.worker(_process):
        child = await wait_state(q, node.children[0].job.id, "completed")
    parent = await q.get_job(node.job.id)
    assert parent is not None and parent.state == "failed" and parent.failed_reason == "revoked"
    assert child.returnvalue == 1
