"""The retry rule against a real server behind a stalled connection: safe calls ride out a
short stall, an add without a custom id is not resent after a time-out (so it is never added
twice), an add with a custom id is resent and still added once, the budget ends in a typed
error, and entries whose reply was lost are handed back without waiting for stall recovery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from glide import StreamReadGroupOptions

import glidemq
from glidemq import ConnectionOptions, Job, Queue, RetryPolicy, Worker
from glidemq.chaos.proxy import FaultProxy
from glidemq.client.connection import close_client, create_client
from glidemq.worker.watchdog import hand_back_unknown
from tests.helpers import wait_for

TIMEOUT_MS = 300
SLACK = 1.0


@pytest.fixture
async def proxy(valkey_server: Any) -> AsyncIterator[FaultProxy]:
    async with FaultProxy((valkey_server.host, valkey_server.port)) as p:
        yield p


@pytest.fixture
async def queue(proxy: FaultProxy, queue_name: str) -> AsyncIterator[Queue[Any, Any]]:
    """A Queue connected through the proxy, with a short request time-out."""
    conn = ConnectionOptions.from_url(proxy.url, request_timeout_ms=TIMEOUT_MS)
    async with Queue(queue_name, connection=conn) as q:
        await q.get_job_counts()  # connected before any fault
        yield q
        await asyncio.to_thread(proxy.heal)
        await q.obliterate(force=True)


async def heal_after(proxy: FaultProxy, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await asyncio.to_thread(proxy.heal)


async def test_reads_ride_out_a_short_stall(proxy: FaultProxy, queue: Queue[Any, Any]) -> None:
    await queue.add("a", 1)
    await asyncio.to_thread(proxy.stall)
    healer = asyncio.create_task(heal_after(proxy, 1.0))
    started = time.monotonic()
    counts = await queue.get_job_counts()  # times out at least twice, then succeeds
    assert counts.waiting == 1
    assert time.monotonic() - started >= 0.9
    await healer


async def test_add_without_custom_id_is_not_resent_after_a_time_out(
    proxy: FaultProxy, queue: Queue[Any, Any]
) -> None:
    await asyncio.to_thread(proxy.stall)
    started = time.monotonic()
    with pytest.raises(glidemq.ConnectionError, match="may have run"):
        await queue.add("once", 1)
    assert time.monotonic() - started < TIMEOUT_MS / 1000 + SLACK  # one try, no retries
    await asyncio.to_thread(proxy.heal)
    # The held request reaches the server after all: the job exists once, never twice.
    await wait_for(lambda: queue.count(), timeout=5)
    await asyncio.sleep(0.3)
    assert (await queue.get_job_counts()).waiting == 1


async def test_add_with_custom_id_is_resent_and_added_once(
    proxy: FaultProxy, queue: Queue[Any, Any]
) -> None:
    await asyncio.to_thread(proxy.stall)
    healer = asyncio.create_task(heal_after(proxy, 1.0))
    # The first try may have run by the time the resend arrives: then it reports the
    # duplicate (None). Either way the call succeeds and one job exists.
    job = await queue.add("keyed", 1, {"job_id": "order-42"})
    await healer
    assert job is None or job.id == "order-42"
    assert (await queue.get_job_counts()).waiting == 1
    stored = await queue.get_job("order-42")
    assert stored is not None and stored.data == 1


async def test_retry_budget_ends_in_a_typed_error(proxy: FaultProxy, queue_name: str) -> None:
    conn = ConnectionOptions.from_url(
        proxy.url, request_timeout_ms=TIMEOUT_MS, retry=RetryPolicy(budget=1.0)
    )
    async with Queue(queue_name, connection=conn) as queue:
        await queue.get_job_counts()
        await asyncio.to_thread(proxy.stall)
        started = time.monotonic()
        with pytest.raises(glidemq.ConnectionError, match="gave up"):
            await queue.get_job_counts()
        assert time.monotonic() - started < 1.0 + TIMEOUT_MS / 1000 + SLACK
        await asyncio.to_thread(proxy.heal)
        assert (await queue.get_job_counts()).waiting == 0


async def test_entries_whose_reply_was_lost_are_handed_back(
    valkey_server: Any, queue_name: str
) -> None:
    done: list[int] = []
    release = asyncio.Event()

    async def work(job: Job[Any, Any]) -> Any:
        if job.data == 0:
            await release.wait()  # held by the worker the whole time
        done.append(job.data)
        return job.data

    conn = ConnectionOptions.from_url(valkey_server.url, request_timeout_ms=TIMEOUT_MS)
    async with (
        Queue(queue_name, connection=conn) as queue,
        Worker(queue_name, work, connection=conn, concurrency=2, block_timeout=100) as worker,
    ):
        await queue.add("held", 0)
        await wait_for(lambda: worker.active_count == 1)
        worker.pause()
        await asyncio.sleep(0.3)  # a blocking read in flight ends
        await queue.add("lost", 1)
        # What a lost reply leaves behind: the server delivered the entry to this worker's
        # consumer, and the worker never heard of it.
        raw = await create_client(conn)
        try:
            delivered = await raw.xreadgroup(
                {queue.keys.stream: ">"},
                "workers",
                worker.consumer,
                StreamReadGroupOptions(count=1),
            )
            assert delivered
        finally:
            await close_client(raw)
        await asyncio.sleep(TIMEOUT_MS / 1000 + 0.1)  # idle long enough to count as lost
        assert await hand_back_unknown(worker._link) == 1  # the held job stays with the worker
        assert await hand_back_unknown(worker._link) == 0
        worker.resume()
        await wait_for(lambda: done == [1], timeout=5)
        release.set()
        await wait_for(lambda: sorted(done) == [0, 1], timeout=5)
        await queue.obliterate(force=True)
