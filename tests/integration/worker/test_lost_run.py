"""A worker whose running job another worker took over goes on fetching.

Found by the simulator (glidemq.sim, the `block` fault: a job that blocks its worker's loop
for longer than its lock): the heartbeat reported the running job lost and cancelled its run,
which freed the slot without waking the fetch loop. The loop waited for a free slot, so a
worker of concurrency 1 never fetched again and every job of the queue stayed waiting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.client.context import now_ms
from glidemq.wire import fetch as wire_fetch
from tests.helpers import wait_for

LOCK_MS = 900  # heartbeats every 300 ms


async def test_a_worker_keeps_fetching_after_its_running_job_was_taken_over(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs: list[str] = []

    async def process(job: Job[Any, Any]) -> str:
        runs.append(job.data)
        if job.data == "first" and runs.count("first") == 1:
            await asyncio.Event().wait()  # runs until its worker cancels it
        return str(job.data)

    first = await queue.add("j", "first")
    assert first is not None
    worker: Worker[Any, Any] = Worker(
        queue.name,
        process,
        connection=conn,
        concurrency=1,
        lock_duration=LOCK_MS,
        stalled_interval=600_000,  # no stall scan of its own: only the take-over below
    )
    async with worker:
        await wait_for(lambda: runs == ["first"], timeout=10)
        ctx = await queue._context()
        # another worker takes the running job over, as stall recovery does (idle 0 here)
        reply = await wire_fetch.reclaim_stalled(
            ctx, now_ms(), "rescuer", 0, "0-0", 100, 5, "1", (-1, 0), False
        )
        assert int(reply[1]) == 1, reply  # back in the stream
        second = await queue.add("j", "second")
        assert second is not None
        # the heartbeat finds the run lost and cancels it; the worker then fetches both
        assert await first.wait_until_finished(timeout=10) == "completed"
        assert await second.wait_until_finished(timeout=10) == "completed"
    assert runs == ["first", "first", "second"]
