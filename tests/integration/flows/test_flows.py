"""Flows: parents that run after their children, trees and DAGs across queues, failure
semantics, children values, waiting for children from inside a processor, cycles and the
cluster slot rule. Standalone and cluster (queues of one flow share a slot)."""

from __future__ import annotations

import asyncio
import binascii
import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import orjson
import pytest
from glide import GlideClusterClient

from glidemq import (
    ConnectionOptions,
    CrossSlotError,
    CycleError,
    DagNode,
    DuplicateJobError,
    FlowJob,
    FlowProducer,
    Job,
    JobNotFoundError,
    JobStateError,
    Queue,
    Worker,
    chain,
    chord,
    group,
)
from glidemq.keys import queue_slot
from tests.helpers import FAST, wait_for, wait_state

Processor = Callable[[Job[Any, Any]], Awaitable[Any]]


def _slot(name: str) -> int:
    return binascii.crc_hqx(name.encode(), 0) % 16384  # = queue_slot(name), without checks


def same_slot_names(base: str, n: int) -> list[str]:
    """`n` queue names starting with `base` whose keys all hash to one cluster slot."""
    first = f"{base}-0"
    slot = _slot(first)
    names = [first]
    for k in itertools.count(1):
        if len(names) == n:
            assert {queue_slot(name) for name in names} == {slot}
            return names
        name = f"{base}-{k}"
        if _slot(name) == slot:
            names.append(name)
    raise AssertionError("unreachable")


def other_slot_name(base: str, name: str) -> str:
    """A queue name starting with `base` whose slot differs from `name`'s."""
    for k in itertools.count():
        candidate = f"{base}-x{k}"
        if queue_slot(candidate) != queue_slot(name):
            return candidate
    raise AssertionError("unreachable")


@pytest.fixture
async def queues(conn: ConnectionOptions, queue_name: str) -> AsyncIterator[list[Queue[Any, Any]]]:
    """Three connected queues whose names share a cluster slot, obliterated afterwards."""
    qs: list[Queue[Any, Any]] = [Queue(n, connection=conn) for n in same_slot_names(queue_name, 3)]
    for q in qs:
        await q._context()
    yield qs
    for q in qs:
        try:
            await q.obliterate(force=True)
        finally:
            await q.close()


@pytest.fixture
async def flows(conn: ConnectionOptions) -> AsyncIterator[FlowProducer]:
    async with FlowProducer(connection=conn) as producer:
        yield producer


@asynccontextmanager
async def workers(
    conn: ConnectionOptions, names: list[str], processor: Processor, concurrency: int = 10
) -> AsyncIterator[list[Worker[Any, Any]]]:
    """One worker per queue, all running `processor`."""
    async with AsyncExitStack() as stack:
        started = [
            await stack.enter_async_context(
                Worker(n, processor, connection=conn, concurrency=concurrency, **FAST)
            )
            for n in names
        ]
        yield started


async def client_of(queue: Queue[Any, Any]) -> Any:
    return (await queue._context()).client


async def deps_of(queue: Queue[Any, Any], job_id: str) -> set[str]:
    members = await (await client_of(queue)).smembers(f"{queue.keys.base}deps:{job_id}")
    return {m.decode() for m in members}


async def field(queue: Queue[Any, Any], job_id: str, name: str) -> str | None:
    value = await (await client_of(queue)).hget(queue.keys.job(job_id), name)
    return None if value is None else str(value.decode())


def ref(queue: Queue[Any, Any], job_id: str) -> str:
    return f"glide:{{{queue.name}}}:{job_id}"


async def nothing_written(qs: list[Queue[Any, Any]]) -> bool:
    for q in qs:
        keys = await (await client_of(q)).exists([q.keys.job("1"), q.keys.id])
        if keys:
            return False
    return True


async def ok(job: Job[Any, Any]) -> str:
    return "ok"


async def echo(job: Job[Any, Any]) -> Any:
    return job.data


# =========================================================================== trees


async def test_parent_waits_for_children_in_other_queues_and_reads_their_values(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, q2 = queues
    node = await flows.add(
        FlowJob(
            "report",
            q0.name,
            {"n": 0},
            children=[FlowJob("fetch", q1.name, {"n": 1}), FlowJob("parse", q2.name, {"n": 2})],
        )
    )
    parent, c1, c2 = node.job, node.children[0].job, node.children[1].job
    assert parent.state == "waiting-children" and c1.state == "waiting"
    assert (await q0.get_job(parent.id)).state == "waiting-children"  # type: ignore[union-attr]
    assert c1.parent_id == parent.id and c2.parent_id == parent.id
    assert await field(q1, c1.id, "parentId") == parent.id
    assert await field(q1, c1.id, "parentQueue") == f"glide:{{{q0.name}}}"
    assert await deps_of(q0, parent.id) == {ref(q1, c1.id), ref(q2, c2.id)}

    order: list[str] = []

    async def process(job: Job[Any, Any]) -> Any:
        order.append(job.name)
        if job.name == "report":
            return await job.get_children_values()
        return job.data["n"] * 10

    async with workers(conn, [q.name for q in queues], process):
        state = await parent.wait_until_finished(timeout=10)
    assert state == "completed"
    assert order[-1] == "report" and sorted(order[:2]) == ["fetch", "parse"]
    assert parent.returnvalue == {f"{q1.name}:{c1.id}": 10, f"{q2.name}:{c2.id}": 20}
    assert await deps_of(q0, parent.id) == set()


async def test_nested_tree_runs_bottom_up_and_returns_the_tree(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, q2 = queues
    leaves = [FlowJob(f"leaf{i}", q2.name, i) for i in range(3)]
    mid = FlowJob("mid", q1.name, None, children=leaves[:2])
    root = FlowJob("root", q0.name, None, children=[mid, leaves[2]])
    node = await flows.add(root)
    assert [c.job.name for c in node.children] == ["mid", "leaf2"]
    assert [c.job.name for c in node.children[0].children] == ["leaf0", "leaf1"]
    assert node.children[0].job.state == "waiting-children"
    assert node.children[0].job.parent_id == node.job.id

    finished: dict[str, int] = {}
    started: dict[str, int] = {}
    tick = itertools.count()

    async def process(job: Job[Any, Any]) -> Any:
        started[job.name] = next(tick)
        await asyncio.sleep(0.01)
        finished[job.name] = next(tick)
        return job.name

    async with workers(conn, [q.name for q in queues], process):
        assert await node.job.wait_until_finished(timeout=10) == "completed"
    assert started["mid"] > max(finished["leaf0"], finished["leaf1"])
    assert started["root"] > max(finished["mid"], finished["leaf2"])
    mid_values = await node.children[0].job.get_children_values()
    assert sorted(mid_values.values()) == ["leaf0", "leaf1"]


async def test_dag_of_1000_jobs_across_three_same_slot_queues_completes_in_dependency_order(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    rng = random.Random(7)
    names = [q.name for q in queues]
    deps: dict[str, list[str]] = {}
    nodes = []
    for i in range(1000):
        window = list(range(max(0, i - 40), i))
        chosen = rng.sample(window, k=min(len(window), rng.randint(0, 3)))
        deps[f"n{i}"] = [f"n{j}" for j in chosen]
        nodes.append(DagNode(f"n{i}", names[i % 3], {"i": i}, depends_on=deps[f"n{i}"]))
    rng.shuffle(nodes)  # add_dag takes nodes in any order
    jobs = await flows.add_dag(nodes)
    assert len(jobs) == 1000
    key_of = {(job.queue_name, job.id): key for key, job in jobs.items()}
    with_deps = [k for k, d in deps.items() if d]
    assert all(jobs[k].state == "waiting-children" for k in with_deps)

    tick = itertools.count()
    started: dict[str, int] = {}
    finished: dict[str, int] = {}
    seen_values: dict[str, set[str]] = {}

    async def process(job: Job[Any, Any]) -> str:
        key = key_of[(job.queue_name, job.id)]
        started[key] = next(tick)
        if deps[key]:
            values = await job.get_children_values()
            seen_values[key] = set(values.values())
        finished[key] = next(tick)
        return key

    async with workers(conn, names, process, concurrency=50):
        await wait_for(lambda: len(finished) == 1000, timeout=60)
    for key, ds in deps.items():
        for d in ds:
            assert finished[d] < started[key], f"{key} started before its dependency {d} finished"
        if ds:
            assert seen_values[key] == set(ds)
    counts = [await q.get_job_counts() for q in queues]
    assert sum(c.completed for c in counts) == 1000


async def test_a_parent_priority_and_delay_apply_once_its_children_finished(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    node = await flows.add(
        FlowJob("later", q0.name, None, {"delay": 60_000}, [FlowJob("now", q1.name, None)])
    )
    async with workers(conn, [q1.name], ok):
        delayed = await wait_state(q0, node.job.id, "delayed")
    assert delayed.delay == 60_000
    node = await flows.add(
        FlowJob("prio", q0.name, None, {"priority": 3}, [FlowJob("now", q1.name, None)])
    )
    async with workers(conn, [q1.name], ok):
        await wait_state(q0, node.job.id, "prioritized")


async def test_chain_group_and_chord_build_what_they_promise(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    runs: list[str] = []

    async def process(job: Job[Any, Any]) -> Any:
        runs.append(job.name)
        values = await job.get_children_values()
        return {"name": job.name, "after": sorted(v["name"] for v in values.values())}

    steps = [FlowJob(f"step{i}", q0.name if i % 2 else q1.name) for i in range(4)]
    chained = await flows.add(chain(steps))
    grouped = await flows.add(group([FlowJob("g1", q1.name), FlowJob("g2", q1.name)]))
    chorded = await flows.add(
        chord([FlowJob("c1", q1.name), FlowJob("c2", q1.name)], FlowJob("sum", q0.name))
    )
    async with workers(conn, [q0.name, q1.name], process):
        for n in (chained, grouped, chorded):
            assert await n.job.wait_until_finished(timeout=10) == "completed"
    assert [r for r in runs if r.startswith("step")] == ["step0", "step1", "step2", "step3"]
    assert chained.job.returnvalue == {"name": "step3", "after": ["step2"]}
    assert grouped.job.queue_name == q1.name
    assert grouped.job.returnvalue == {"name": "__group__", "after": ["g1", "g2"]}
    assert chorded.job.returnvalue == {"name": "sum", "after": ["c1", "c2"]}


# =========================================================================== failures


async def test_a_child_failing_for_good_fails_its_parent_and_grandparent_by_default(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, q2 = queues
    bad = FlowJob("bad", q2.name, None, {"attempts": 2})
    good = FlowJob("good", q2.name, None)
    node = await flows.add(
        FlowJob(
            "top", q0.name, None, children=[FlowJob("mid", q1.name, None, children=[bad, good])]
        )
    )
    ran: list[str] = []

    async def process(job: Job[Any, Any]) -> Any:
        ran.append(job.name)
        if job.name == "bad":
            raise RuntimeError("boom")
        return "ok"

    async with workers(conn, [q.name for q in queues], process):
        top = await wait_state(q0, node.job.id, "failed")
        await wait_for(lambda: "good" in ran)
    mid = await q1.get_job(node.children[0].job.id)
    assert mid is not None and mid.state == "failed"
    bad_id = node.children[0].children[0].job.id
    assert mid.failed_reason == f"child {ref(q2, bad_id)} failed: boom"
    assert top.failed_reason is not None and ref(q1, mid.id) in top.failed_reason
    assert ran.count("bad") == 2 and "mid" not in ran and "top" not in ran


async def test_ignore_dependency_on_failure_lets_the_parent_run_and_records_the_reason(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    node = await flows.add(
        FlowJob(
            "parent",
            q0.name,
            None,
            children=[
                FlowJob("bad", q1.name, None, {"ignore_dependency_on_failure": True}),
                FlowJob("good", q1.name, 5),
            ],
        )
    )

    async def process(job: Job[Any, Any]) -> Any:
        if job.name == "bad":
            raise RuntimeError("nope")
        if job.name == "parent":
            return {
                "values": await job.get_children_values(),
                "ignored": await job.get_ignored_children_failures(),
            }
        return job.data

    async with workers(conn, [q0.name, q1.name], process):
        assert await node.job.wait_until_finished(timeout=10) == "completed"
    bad, good = node.children[0].job, node.children[1].job
    assert node.job.returnvalue == {
        "values": {f"{q1.name}:{good.id}": 5},
        "ignored": {f"{q1.name}:{bad.id}": "nope"},
    }


async def test_remove_dependency_on_failure_lets_the_parent_run_without_a_trace(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    node = await flows.add(
        FlowJob(
            "parent",
            q0.name,
            None,
            children=[FlowJob("bad", q1.name, None, {"remove_dependency_on_failure": True})],
        )
    )

    async def process(job: Job[Any, Any]) -> Any:
        if job.name == "bad":
            raise RuntimeError("nope")
        return [await job.get_children_values(), await job.get_ignored_children_failures()]

    async with workers(conn, [q0.name, q1.name], process):
        assert await node.job.wait_until_finished(timeout=10) == "completed"
    assert node.job.returnvalue == [{}, {}]
    assert (await q1.get_job(node.children[0].job.id)).state == "failed"  # type: ignore[union-attr]


async def test_revoking_a_waiting_child_fails_its_parent_at_once(
    queues: list[Queue[Any, Any]], flows: FlowProducer
) -> None:
    q0, q1, _ = queues
    node = await flows.add(
        FlowJob("parent", q0.name, None, children=[FlowJob("a", q1.name), FlowJob("b", q1.name)])
    )
    child = node.children[0].job
    assert await q1.revoke(child.id) == "revoked"
    parent = await q0.get_job(node.job.id)
    assert parent is not None and parent.state == "failed"
    assert parent.failed_reason == f"child {ref(q1, child.id)} failed: revoked"


async def test_removing_a_waiting_child_drops_the_dependency(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    node = await flows.add(
        FlowJob("parent", q0.name, None, children=[FlowJob("a", q1.name), FlowJob("b", q1.name, 2)])
    )
    a, b = node.children[0].job, node.children[1].job
    await q1.remove(a.id)
    assert await deps_of(q0, node.job.id) == {ref(q1, b.id)}
    assert (await q0.get_job(node.job.id)).state == "waiting-children"  # type: ignore[union-attr]
    await q1.remove(b.id)  # the last one: the parent runs without them
    assert (await q0.get_job(node.job.id)).state == "waiting"  # type: ignore[union-attr]

    async def process(job: Job[Any, Any]) -> Any:
        return await job.get_children_values()

    async with workers(conn, [q0.name], process):
        assert await node.job.wait_until_finished(timeout=10) == "completed"
    assert node.job.returnvalue == {}


async def test_draining_or_cleaning_a_childs_queue_drops_it_from_its_parent(
    queues: list[Queue[Any, Any]], flows: FlowProducer
) -> None:
    q0, q1, q2 = queues
    drained = await flows.add(FlowJob("p1", q0.name, None, children=[FlowJob("c", q1.name)]))
    cleaned = await flows.add(
        FlowJob("p2", q0.name, None, children=[FlowJob("c", q2.name, None, {"delay": 60_000})])
    )
    assert await q1.drain() == 1
    assert (await q0.get_job(drained.job.id)).state == "waiting"  # type: ignore[union-attr]
    await asyncio.sleep(0.01)  # clean takes jobs added strictly before now - grace
    assert await q2.clean(0, state="delayed") == [cleaned.children[0].job.id]
    assert (await q0.get_job(cleaned.job.id)).state == "waiting"  # type: ignore[union-attr]


async def test_adding_under_a_missing_or_finished_parent_is_refused(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    with pytest.raises(JobNotFoundError):
        await flows.add(FlowJob("c", q1.name), parent=(q0.name, "nope"))
    done = await q0.add("done", None)
    assert done is not None
    async with workers(conn, [q0.name], ok):
        await done.wait_until_finished(timeout=10)
    with pytest.raises(JobStateError):
        await flows.add(FlowJob("c", q1.name), parent=done)
    assert (await q1.get_job_counts()).waiting == 0


async def test_removing_a_waiting_parent_leaves_its_children_harmless(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    node = await flows.add(FlowJob("parent", q0.name, None, children=[FlowJob("a", q1.name)]))
    await q0.remove(node.job.id)
    assert await q0.get_job(node.job.id) is None
    assert await deps_of(q0, node.job.id) == set()
    async with workers(conn, [q1.name], ok):
        child = node.children[0].job
        assert await child.wait_until_finished(timeout=10) == "completed"
    assert await q0.get_job(node.job.id) is None  # not recreated by the child's result


# =========================================================================== waiting children


async def test_waiting_children_jobs_are_counted_and_listed_until_they_leave_that_state(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    a = await flows.add(
        FlowJob("a", q0.name, None, {"ttl": 60_000}, children=[FlowJob("c", q1.name)])
    )
    assert a.job.expire_at == a.job.timestamp + 60_000
    assert a.children[0].job.expire_at is None
    b = await flows.add(FlowJob("b", q0.name, None, children=[FlowJob("c", q1.name)]))
    c = await flows.add(FlowJob("c", q0.name, None, children=[FlowJob("c", q1.name)]))
    d = await q0.add("d", None)
    d_child = await q1.add("dc", None, {"delay": 60_000})
    assert d is not None and d_child is not None
    assert await flows.add_dependency(d, d_child) == "added"
    counts = await q0.get_job_counts()
    assert (counts.waiting_children, counts.waiting, await q0.count()) == (4, 0, 0)
    assert counts.as_dict()["waiting_children"] == 4
    in_order = [a.job.id, b.job.id, c.job.id, d.id]  # the order they started to wait
    assert [j.id for j in await q0.get_jobs("waiting-children")] == in_order
    assert [j.id for j in await q0.get_jobs("waiting-children", 1, 2)] == in_order[1:3]
    assert await a.job.is_waiting_children() and not await a.job.is_waiting()
    assert await q0.get_jobs("waiting") == []

    assert await q1.revoke(b.children[0].job.id) == "revoked"  # fails b
    await q0.remove(c.job.id)
    await q1.remove(d_child.id)  # d's only child is gone: d is enqueued
    assert [j.id for j in await q0.get_jobs("waiting-children")] == [a.job.id]
    assert (await q0.get_job_counts()).waiting_children == 1
    async with workers(conn, [q1.name], ok):
        await wait_state(q0, a.job.id, "waiting")
    counts = await q0.get_job_counts()
    assert (counts.waiting_children, counts.waiting, counts.failed) == (0, 2, 1)
    assert await q0.get_jobs("waiting-children") == []


async def test_move_to_waiting_children_parks_a_running_job_until_its_new_child_finished(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    runs = 0
    continued: list[bool] = []

    async def process(job: Job[Any, Any]) -> Any:
        nonlocal runs
        if job.name == "child":
            return "from child"
        runs += 1
        if job.data["step"] == 0:
            await flows.add(FlowJob("child", q1.name), parent=job)
            await job.update_data({"step": 1})
            await job.move_to_waiting_children()  # raises: the worker stops running it
            raise AssertionError("not reached")
        await job.move_to_waiting_children()  # nothing pending any more: returns
        continued.append(True)
        return await job.get_children_values()

    parent = await q0.add("parent", {"step": 0})
    assert parent is not None
    async with workers(conn, [q0.name], process) as (w0,):
        await wait_state(q0, parent.id, "waiting-children")
        assert w0.active_count == 0 and w0.failed_count == 0
        assert [j.id for j in await q0.get_jobs("waiting-children")] == [parent.id]
        async with workers(conn, [q1.name], process):
            assert await parent.wait_until_finished(timeout=10) == "completed"
    assert runs == 2 and continued == [True]
    (value,) = parent.returnvalue.values()
    assert value == "from child"


async def test_move_to_waiting_children_outside_a_worker_is_refused(
    queues: list[Queue[Any, Any]],
) -> None:
    job = await queues[0].add("j", None)
    assert job is not None
    with pytest.raises(JobStateError):
        await job.move_to_waiting_children()


# =========================================================================== DAG edges, cycles


async def test_a_dag_node_with_two_parents_is_one_job_both_wait_for(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, q2 = queues
    jobs = await flows.add_dag(
        [
            DagNode("source", q2.name, 1),
            DagNode("left", q0.name, None, depends_on=["source"]),
            DagNode("right", q1.name, None, depends_on=["source"]),
        ]
    )
    source = jobs["source"]
    assert await field(q2, source.id, "extraParents") is not None
    assert ref(q2, source.id) in await deps_of(q0, jobs["left"].id)
    assert ref(q2, source.id) in await deps_of(q1, jobs["right"].id)

    async def process(job: Job[Any, Any]) -> Any:
        return job.data if job.name == "source" else await job.get_children_values()

    async with workers(conn, [q.name for q in queues], process):
        for key in ("left", "right"):
            assert await jobs[key].wait_until_finished(timeout=10) == "completed"
    expected = {f"{q2.name}:{source.id}": 1}
    assert jobs["left"].returnvalue == expected == jobs["right"].returnvalue


async def test_add_dependency_makes_a_waiting_job_wait_and_refuses_a_cycle(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0, q1, _ = queues
    parent = await q0.add("parent", None)
    child = await q1.add("child", 7, {"delay": 60_000})
    assert parent is not None and child is not None
    assert await flows.add_dependency(parent, child) == "added"
    assert await flows.add_dependency(parent, (q1.name, child.id)) == "exists"
    assert (await q0.get_job(parent.id)).state == "waiting-children"  # type: ignore[union-attr]
    with pytest.raises(CycleError):
        await flows.add_dependency(child, parent)
    with pytest.raises(CycleError):
        await flows.add_dependency(parent, parent)

    async def process(job: Job[Any, Any]) -> Any:
        return job.data if job.name == "child" else await job.get_children_values()

    await child.promote()
    async with workers(conn, [q0.name, q1.name], process):
        assert await parent.wait_until_finished(timeout=10) == "completed"
    assert parent.returnvalue == {f"{q1.name}:{child.id}": 7}
    late = await q0.add("late", None)
    assert late is not None
    assert await flows.add_dependency(late, child) == "completed"  # recorded, nothing to wait
    assert await late.get_children_values() == {f"{q1.name}:{child.id}": 7}
    with pytest.raises(JobStateError):
        await flows.add_dependency(parent, child)  # the parent finished


async def test_a_cycle_is_refused_before_anything_is_written(
    queues: list[Queue[Any, Any]], flows: FlowProducer
) -> None:
    q0, q1, _ = queues
    a = FlowJob("a", q0.name)
    b = FlowJob("b", q1.name, children=[a])
    a.children.append(b)
    with pytest.raises(CycleError) as err:
        await flows.add(FlowJob("root", q0.name, children=[a]))
    assert err.value.cycle == [f"{q0.name}:a", f"{q1.name}:b", f"{q0.name}:a"]
    with pytest.raises(CycleError) as err:
        await flows.add_dag(
            [
                DagNode("x", q0.name, depends_on=["z"]),
                DagNode("y", q0.name, depends_on=["x"]),
                DagNode("z", q1.name, depends_on=["y"]),
            ]
        )
    assert err.value.cycle == ["x", "z", "y", "x"]
    assert await nothing_written(queues)


async def test_a_taken_custom_id_writes_nothing_of_the_flow(
    queues: list[Queue[Any, Any]], flows: FlowProducer
) -> None:
    q0, q1, _ = queues
    await q1.add("existing", None, {"job_id": "taken"})
    flow = FlowJob("p", q0.name, children=[FlowJob("c", q1.name, None, {"job_id": "taken"})])
    with pytest.raises(DuplicateJobError) as err:
        await flows.add(flow)
    assert (err.value.queue, err.value.job_id) == (q1.name, "taken")
    assert (await q0.get_job_counts()).waiting == 0
    assert await (await client_of(q0)).exists([q0.keys.job("1")]) == 0
    results = await flows.add_bulk([flow, FlowJob("p", q0.name, children=[FlowJob("c", q1.name)])])
    assert results[0] is None and results[1] is not None
    assert results[1].job.state == "waiting-children"


# =========================================================================== cluster slots


async def test_queues_in_different_slots_are_refused_in_a_cluster_only(
    queues: list[Queue[Any, Any]], flows: FlowProducer, conn: ConnectionOptions
) -> None:
    q0 = queues[0]
    far = other_slot_name(q0.name, q0.name)
    flow = FlowJob("p", q0.name, children=[FlowJob("c", far)])
    other: Queue[Any, Any] = Queue(far, connection=conn)
    try:
        client = await client_of(q0)
        if isinstance(client, GlideClusterClient):
            for q in (*queues, other):  # the slots computed here are the server's
                server_slot = await client.custom_command(["CLUSTER", "KEYSLOT", q.keys.stream])
                assert server_slot == queue_slot(q.name)
            with pytest.raises(CrossSlotError) as err:
                await flows.add(flow)
            assert err.value.slots == {q0.name: queue_slot(q0.name), far: queue_slot(far)}
            assert await nothing_written([q0, other])
            job = await other.add("j", None)
            assert job is not None
            with pytest.raises(CrossSlotError):
                await flows.add_dependency((q0.name, "1"), job)
        else:
            node = await flows.add(flow)
            assert node.children[0].job.queue_name == far
            assert await deps_of(q0, node.job.id) == {ref(other, node.children[0].job.id)}
    finally:
        await other.obliterate(force=True)
        await other.close()


# =========================================================================== wire form


async def test_wire_add_flow_creates_parent_children_and_extra_deps(
    queues: list[Queue[Any, Any]],
) -> None:
    q0, q1, _ = queues
    client = await client_of(q0)
    existing = await q1.add("existing", None, {"delay": 60_000})
    done = await q1.add("done", None)
    assert existing is not None and done is not None
    await (await client_of(q1)).hset(
        q1.keys.job(done.id), {"state": "completed", "returnvalue": "42"}
    )

    def qkeys(q: Queue[Any, Any]) -> list[str]:
        k = q.keys
        return [k.id, k.stream, k.scheduled, k.events]

    now = "1700000000000"
    child = ["c", "{}", "{}", "0", "0", "1", f"glide:{{{q1.name}}}", q0.name, ""]
    args = ["p", '{"x":1}', "{}", now, "0", "0", "1", "2", "", *child, *child]
    args += ["2", ref(q1, existing.id), ref(q1, done.id)]
    reply = await client.fcall("glidemq_addFlow", keys=qkeys(q0) + qkeys(q1) * 2, arguments=args)
    pid, c1, c2 = orjson.loads(reply)
    assert await deps_of(q0, pid) == {ref(q1, c1), ref(q1, c2), ref(q1, existing.id)}
    parent = await q0.get_job(pid)
    assert parent is not None and parent.state == "waiting-children" and parent.data == {"x": 1}
    assert await parent.get_children_values() == {f"{q1.name}:{done.id}": 42}
    assert await field(q1, c1, "parentQueue") == f"glide:{{{q0.name}}}"
    assert await field(q1, existing.id, "parentId") == pid

    again = ["p", "{}", "{}", now, "0", "0", "1", "1", "", *child[:-1], existing.id, "0"]
    reply = await client.fcall("glidemq_addFlow", keys=qkeys(q0) + qkeys(q1), arguments=again)
    assert orjson.loads(reply) == ["duplicate"]


async def test_a_child_whose_parent_queue_is_a_bare_name_still_settles_with_it(
    queues: list[Queue[Any, Any]], conn: ConnectionOptions
) -> None:
    # glide-mq producers write parentQueue as the queue name, not as the key prefix.
    q0, q1, _ = queues
    parent = await q0.add("parent", None, {"delay": 60_000})
    child = await q1.add("child", 3)
    assert parent is not None and child is not None
    c0, c1 = await client_of(q0), await client_of(q1)
    await c0.hset(q0.keys.job(parent.id), {"state": "waiting-children", "delay": "0"})
    await c0.zrem(q0.keys.scheduled, [parent.id])
    await c0.sadd(f"{q0.keys.base}deps:{parent.id}", [ref(q1, child.id)])
    await c1.hset(q1.keys.job(child.id), {"parentId": parent.id, "parentQueue": q0.name})
    async with workers(conn, [q1.name], echo):
        await wait_state(q0, parent.id, "waiting")
    assert await parent.get_children_values() == {f"{q1.name}:{child.id}": 3}


async def test_a_parent_failed_by_a_child_leaves_no_dependency_set_once_removed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    # the parent fails while its second child is still pending; removed on failure, it
    # takes the set of children it waited for with it
    async with FlowProducer(connection=conn) as flows:
        node = await flows.add(
            FlowJob(
                "parent",
                queue.name,
                {},
                {"remove_on_fail": True},
                [
                    FlowJob("bad", queue.name, {}, {"attempts": 1}),
                    FlowJob("later", queue.name, {}, {"delay": 60_000}),
                ],
            )
        )
    parent_id = node.job.id
    deps = queue.keys.base + "deps:" + parent_id
    ctx = await queue._context()
    assert await ctx.command(lambda c: c.exists([deps])) == 1

    async def work(job: Job[Any, Any]) -> None:
        raise RuntimeError("no")

    async with Worker(queue.name, work, connection=conn, **FAST):

        async def parent_gone() -> bool:
            return await queue.get_job(parent_id) is None

        await wait_for(parent_gone)
    assert await ctx.command(lambda c: c.exists([deps])) == 0
