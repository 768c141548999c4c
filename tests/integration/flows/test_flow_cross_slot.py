"""Flows over queues of different cluster slots: refused with a CrossSlotError that names the
way out, and that way (a relay child in the parent's slot calling add_and_wait on the other
queue) works, on standalone and cluster alike."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from glidemq import ConnectionOptions, CrossSlotError, FlowJob, FlowProducer, Job, Queue, Worker
from glidemq.keys import queue_slot
from tests.helpers import FAST, wait_state


def _far_name(name: str) -> str:
    for k in itertools.count():
        candidate = f"{name}-far{k}"
        if queue_slot(candidate) != queue_slot(name):
            return candidate
    raise AssertionError("unreachable")


@pytest.fixture
async def pair(conn: ConnectionOptions, queue_name: str) -> AsyncIterator[tuple[Any, Any]]:
    """A queue and a second queue in another cluster slot, obliterated afterwards."""
    near: Queue[Any, Any] = Queue(queue_name, connection=conn)
    far: Queue[Any, Any] = Queue(_far_name(queue_name), connection=conn)
    try:
        yield near, far
    finally:
        for q in (near, far):
            try:
                await q.obliterate(force=True)
            finally:
                await q.close()


async def test_cross_slot_error_names_both_ways_out(valkey_cluster: Any, queue_name: str) -> None:
    conn = ConnectionOptions(addresses=tuple(valkey_cluster.addresses), cluster=True)
    far = _far_name(queue_name)
    async with FlowProducer(connection=conn) as flows:
        with pytest.raises(CrossSlotError) as err:
            await flows.add(FlowJob("p", queue_name, children=[FlowJob("c", far)]))
    text = str(err.value)
    assert "glidemq.keys.queue_slot" in text and "add_and_wait" in text
    assert "Clusters: one slot per flow" in text


async def test_a_relay_child_runs_remote_work_for_a_parent_in_another_slot(
    conn: ConnectionOptions, pair: tuple[Any, Any]
) -> None:
    near, far = pair

    async def remote(job: Job[Any, Any]) -> Any:
        if job.data.get("fail"):
            raise RuntimeError("remote broke")
        return job.data["n"] * 10

    async def local(job: Job[Any, Any]) -> Any:
        if job.name == "relay":  # in the parent's slot: wait for the remote job's outcome
            return await far.add_and_wait("work", job.data, timeout=30)
        return sorted((await job.get_children_values()).values())

    async with FlowProducer(connection=conn) as flows:
        good = await flows.add(
            FlowJob(
                "collect",
                near.name,
                children=[
                    FlowJob("relay", near.name, {"n": 1}),
                    FlowJob("relay", near.name, {"n": 2}),
                ],
            )
        )
        bad = await flows.add(
            FlowJob("collect", near.name, children=[FlowJob("relay", near.name, {"fail": True})])
        )
        async with (
            Worker(near.name, local, connection=conn, concurrency=4, **FAST),
            Worker(far.name, remote, connection=conn, concurrency=4, **FAST),
        ):
            done = await wait_state(near, good.job.id, "completed", timeout=30)
            failed = await wait_state(near, bad.job.id, "failed", timeout=30)
    assert done.returnvalue == [10, 20]
    assert "remote broke" in (failed.failed_reason or "")
