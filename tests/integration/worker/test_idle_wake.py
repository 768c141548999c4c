"""Idle wake: an idle worker's blocking read delivers to `<consumer>:wake`, and
glidemq_activateWoken, queued behind the read in one pipeline, moves what it read to the
worker's consumer and activates it. Entries stranded under the wake consumer are taken by
the next wake; pause, a lost library and another producer's entries each end as documented."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from glide import StreamGroupOptions, StreamReadGroupOptions

from glidemq import Job, Queue, ValidationError, Worker, WorkerOptions
from glidemq.worker.fetcher import wake_consumer
from tests.helpers import FAST, wait_for, wait_state


async def _consumers(queue: Queue[Any, Any]) -> list[str]:
    ctx = await queue._context()
    stream = queue.keys.stream
    got = await ctx.command(lambda c: c.xinfo_consumers(stream, "workers"))
    return sorted(c[b"name"].decode() for c in got)


async def _idle(worker: Worker[Any, Any]) -> None:
    """Wait until the worker sits in its blocking read (it said 'drained')."""
    drained = asyncio.Event()
    worker.on("drained", lambda *_: drained.set())
    await asyncio.wait_for(drained.wait(), timeout=10)
    await asyncio.sleep(0.05)  # the pipeline is on its way to the server


async def test_an_idle_worker_runs_a_new_job_and_closes_without_a_trace(
    queue: Queue[Any, Any],
) -> None:
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> str:
        ran.append(job.id)
        return "ok"

    worker = Worker(queue.name, work, connection=queue.connection, consumer="w-idle", **FAST)
    async with worker:
        await _idle(worker)
        job = await queue.add("j", {"x": 1})
        done = await wait_state(queue, job.id, "completed")
        assert done.returnvalue == "ok" and done.processed_on is not None
        assert ran == [job.id]
    # a clean close removes the worker's consumer and its wake consumer
    assert not {"w-idle", wake_consumer("w-idle")} & set(await _consumers(queue))


async def test_entries_stranded_under_the_wake_consumer_run_on_the_next_wake(
    queue: Queue[Any, Any],
) -> None:
    # A read that delivered to the wake consumer but whose activation never ran (the server
    # went away between them): the entry sits in that consumer's pending list.
    ctx = await queue._context()
    stranded = await queue.add("j", {"n": 1})
    stream = queue.keys.stream
    wake = wake_consumer("w-stranded")
    await ctx.command(
        lambda c: c.xgroup_create(stream, "workers", "0", StreamGroupOptions(make_stream=True))
    )
    read = await ctx.command(
        lambda c: c.xreadgroup({stream: ">"}, "workers", wake, StreamReadGroupOptions(count=10))
    )
    assert read is not None and len(read[stream.encode()]) == 1
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> None:
        ran.append(job.id)

    worker = Worker(queue.name, work, connection=queue.connection, consumer="w-stranded", **FAST)
    async with worker:
        await _idle(worker)
        assert ran == []  # a non-blocking fetch does not see it: it was delivered already
        later = await queue.add("j", {"n": 2})
        await wait_state(queue, later.id, "completed")
        await wait_state(queue, stranded.id, "completed")
    assert sorted(ran) == sorted([stranded.id, later.id])
    assert (await queue.get_job_counts()).completed == 2


async def test_a_job_read_while_the_worker_was_paused_goes_back_and_runs_once(
    queue: Queue[Any, Any],
) -> None:
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> None:
        ran.append(job.id)

    worker = Worker(queue.name, work, connection=queue.connection, **FAST)
    async with worker:
        await _idle(worker)
        worker.pause()  # the blocking read goes on until a job comes or it times out
        job = await queue.add("j", {})

        async def back_and_waiting() -> bool:
            j = await queue.get_job(job.id)
            return j is not None and await j.get_state() == "waiting"

        await asyncio.sleep(0.3)
        await wait_for(back_and_waiting)
        assert ran == []
        worker.resume()
        await wait_state(queue, job.id, "completed")
    assert ran == [job.id]


async def test_a_library_lost_while_the_worker_waits_is_loaded_again(
    queue: Queue[Any, Any],
) -> None:
    errors: list[BaseException] = []
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> None:
        ran.append(job.id)

    worker = Worker(queue.name, work, connection=queue.connection, **FAST)
    worker.on("error", errors.append)
    async with worker:
        await _idle(worker)
        ctx = await queue._context()
        await ctx.command(lambda c: c.function_flush())  # every primary in a cluster
        # an entry naming no job wakes the worker while the library is gone
        stream = queue.keys.stream
        await ctx.command(lambda c: c.xadd(stream, [("id", "no-such-job")]))

        async def settled() -> bool:
            pending = await ctx.command(lambda c: c.xpending(stream, "workers"))
            return pending[0] == 0

        await wait_for(settled)
        job = await queue.add("j", {})
        await wait_state(queue, job.id, "completed")
    assert ran == [job.id]
    assert errors == []


def test_a_consumer_name_ending_in_wake_is_refused() -> None:
    with pytest.raises(ValidationError, match="consumer"):
        WorkerOptions(consumer="w1:wake")


async def test_each_job_after_idle_runs_once_in_order(queue: Queue[Any, Any]) -> None:
    ran: list[int] = []

    async def work(job: Job[Any, Any]) -> None:
        ran.append(int(job.data))

    worker = Worker(queue.name, work, connection=queue.connection, **FAST)
    async with worker:
        await _idle(worker)
        for i in range(5):  # the worker is idle again before each add
            job = await queue.add("j", i)
            await wait_state(queue, job.id, "completed")
    assert ran == list(range(5))
