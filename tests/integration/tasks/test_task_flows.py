"""chain, group and chord built from task calls (`task.flow_job(...)`) and run by
`glidemq.task_processor`, async and sync: every job of the flow completes, the parent that
`group` adds (`__group__`) included, which returns its children's values. No job is left
failed or waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import glidemq
from glidemq import ConnectionOptions, FlowProducer, Queue, Worker, sync
from tests.helpers import FAST


def _tasks(queue_name: str, conn: ConnectionOptions) -> tuple[Any, Any, Any]:
    @glidemq.task(queue_name, connection=conn)
    async def add(n: int) -> int:
        before = await glidemq.current_job().get_children_values()
        return sum(before.values()) + n

    @glidemq.task(queue_name, connection=conn)
    def total() -> int:  # a sync task: current_job()'s methods block
        return sum(glidemq.current_job().get_children_values().values())

    @glidemq.task(queue_name, connection=conn)
    def square(n: int) -> int:
        return n * n

    return add, total, square


async def _assert_nothing_left(queue: Queue[Any, Any]) -> None:
    counts = (await queue.get_job_counts()).as_dict()
    left = {state: n for state, n in counts.items() if n and state != "completed"}
    assert left == {}, f"jobs left behind: {left}"


async def test_chain_group_and_chord_of_tasks_complete_async(
    conn: ConnectionOptions, queue_name: str
) -> None:
    add, total, square = _tasks(queue_name, conn)
    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    processor = glidemq.task_processor(add, total, square)
    try:
        async with (
            Worker(queue_name, processor, connection=conn, concurrency=4, **FAST),
            FlowProducer(connection=conn) as flows,
        ):
            steps = await flows.add(glidemq.chain([add.flow_job(n) for n in (1, 2, 3)]))
            fan = await flows.add(glidemq.group([square.flow_job(n) for n in (1, 2, 3)]))
            both = await flows.add(
                glidemq.chord([square.flow_job(2), square.flow_job(3)], total.flow_job())
            )
            for node in (steps, fan, both):
                assert await node.job.wait_until_finished(timeout=20) == "completed"
            assert steps.job.returnvalue == 6
            assert both.job.returnvalue == 13
            assert fan.job.name == "__group__"
            by_child = {f"{queue_name}:{c.job.id}": c.job.data["n"] ** 2 for c in fan.children}
            assert fan.job.returnvalue == by_child
            assert sorted(fan.job.returnvalue.values()) == [1, 4, 9]
        await _assert_nothing_left(queue)
    finally:
        await queue.obliterate(force=True)
        await queue.close()


def _run_sync(queue_name: str, conn: ConnectionOptions) -> tuple[Any, Any, Any]:
    add, total, square = _tasks(queue_name, conn)
    processor = glidemq.task_processor(add, total, square)
    with (
        sync.Worker(queue_name, processor, connection=conn, concurrency=4, **FAST),
        sync.FlowProducer(connection=conn) as flows,
    ):
        steps = flows.add(glidemq.chain([add.flow_job(n) for n in (1, 2, 3)]))
        fan = flows.add(glidemq.group([square.flow_job(n) for n in (1, 2, 3)]))
        both = flows.add(glidemq.chord([square.flow_job(2), square.flow_job(3)], total.flow_job()))
        return steps.job.result(timeout=20), fan.job.result(timeout=20), both.job.result(20)


async def test_chain_group_and_chord_of_tasks_complete_sync(
    conn: ConnectionOptions, queue_name: str
) -> None:
    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    try:
        chained, grouped, chorded = await asyncio.to_thread(_run_sync, queue_name, conn)
        assert (chained, chorded) == (6, 13)
        assert isinstance(grouped, dict) and sorted(grouped.values()) == [1, 4, 9]
        await _assert_nothing_left(queue)
    finally:
        await queue.obliterate(force=True)
        await queue.close()


async def test_a_task_named_like_the_group_parent_runs_instead(
    conn: ConnectionOptions, queue_name: str
) -> None:
    _, _, square = _tasks(queue_name, conn)

    @glidemq.task(queue_name, connection=conn, name="__group__")
    async def gather() -> list[int]:
        return sorted((await glidemq.current_job().get_children_values()).values())

    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    try:
        processor = glidemq.task_processor(square, gather)
        async with (
            Worker(queue_name, processor, connection=conn, **FAST),
            FlowProducer(connection=conn) as flows,
        ):
            fan = await flows.add(glidemq.group([square.flow_job(n) for n in (3, 1)]))
            assert await fan.job.wait_until_finished(timeout=20) == "completed"
            assert fan.job.returnvalue == [1, 9]
    finally:
        await queue.obliterate(force=True)
        await queue.close()
