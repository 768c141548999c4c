"""A workflow run that lost its job cannot write its history: a worker whose step outlived
its lock (it stopped heart-beating in time, as a frozen process would) is taken over by
stall recovery, and its late record is refused as stale while the new run's stands."""

from __future__ import annotations

import threading
from typing import Any

import glidemq
from glidemq import ConnectionOptions, Queue, Worker, WorkflowContext
from tests.helpers import wait_for, wait_state

SLOW_LOCK_MS = 30_000  # heartbeats every 5 s: the first run looks dead before its next beat
FAST_LOCK_MS = 1_000  # the second worker reclaims entries idle for a second


async def test_a_run_taken_over_by_stall_recovery_cannot_record_its_step(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    calls: list[str] = []
    release = {"first": threading.Event(), "second": threading.Event()}

    def charge() -> str:
        run = "first" if not calls else "second"
        calls.append(run)
        release[run].wait(20)  # the first outlives its lock: its run is taken over
        return run

    @glidemq.workflow(queue_name)
    async def pay(ctx: WorkflowContext) -> str:
        return await ctx.step("charge", charge)

    processor = glidemq.task_processor(pay)
    async with Queue(queue_name, connection=standalone_conn) as q:
        job = await q.add(pay.name, pay.payload(), pay.options)
        assert job is not None
        slow = Worker(queue_name, processor, connection=standalone_conn, lock_duration=SLOW_LOCK_MS)
        errors: list[Any] = []
        slow.on("error", errors.append)
        async with slow:
            await wait_for(lambda: calls == ["first"])
            async with Worker(
                queue_name,
                processor,
                connection=standalone_conn,
                lock_duration=FAST_LOCK_MS,
                stalled_interval=200,
                promotion_interval=20,
            ):
                await wait_for(lambda: calls == ["first", "second"], timeout=20)
                # the old run's step returns first, while the new run's is still running:
                # its record is refused, so it cannot take the place of the new one's
                release["first"].set()
                await wait_for(lambda: slow.active_count == 0, timeout=10)
                release["second"].set()
                done = await wait_state(q, job.id, "completed", timeout=20)
            stored = await q.get_job(job.id)
        assert calls == ["first", "second"]
        assert done.returnvalue == "second"
        assert stored is not None and stored.state == "completed"
        assert stored.returnvalue == "second"
        assert [(s.name, s.status, s.result) for s in stored.steps] == [
            ("charge", "done", "second")
        ]
        assert stored.stalled_count == 1
        assert slow.completed_count == 0  # its late outcome was not recorded either
        await q.obliterate(force=True)
