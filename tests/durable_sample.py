"""A small durable workflow run to its end and to a wait, for the tests of the faces that
show a workflow's steps (the admin command, the dashboard, the proxy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import glidemq
from glidemq import Queue, Worker, WorkflowContext
from tests.helpers import FAST, wait_state


@dataclass(frozen=True)
class SampleRuns:
    done: str  # completed: charge, child, event, label
    waiting: str  # suspended in its wait for "shipped"


async def run_sample(url: Any, name: str, prefix: str = "glide") -> SampleRuns:
    """Run two workflows of queue `name`: one to completion, one until it waits."""

    @glidemq.task(name)
    async def square(n: int) -> int:
        return n * n

    @glidemq.workflow(name)
    async def order(ctx: WorkflowContext, n: int) -> str:
        charged = await ctx.step("charge", lambda: {"cents": n * 100})
        squared = await ctx.child(square, n)
        shipped = await ctx.wait_for_event("shipped")
        return await ctx.step("label", lambda: f"{charged['cents']}-{squared}-{shipped}")

    async with Queue(name, connection=url, prefix=prefix) as q:
        done = await q.add(order.name, order.payload(3), order.options)
        waiting = await q.add(order.name, order.payload(4), order.options)
        assert done is not None and waiting is not None
        await q.signal(done.id, "shipped", "dhl")  # before it waits: kept for it
        processor = glidemq.task_processor(order, square)
        async with Worker(name, processor, connection=url, prefix=prefix, **FAST):
            await wait_state(q, done.id, "completed", timeout=20)
            await wait_state(q, waiting.id, "suspended", timeout=20)
    return SampleRuns(done.id, waiting.id)
