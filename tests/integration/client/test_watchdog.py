"""The watchdog: a worker whose connections went silent (black-holed, so valkey-glide never
reconnects by itself) gets new clients once the server answers again, and is left alone
while the server is unreachable or while all its slots are busy. A Queue renews its client
the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import glidemq
from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.chaos.proxy import FaultProxy
from glidemq.worker.watchdog import probe
from tests.helpers import wait_for

# bound = block_timeout + request_timeout + 1 s slack = 1.5 s
SETTINGS: dict[str, Any] = {"block_timeout": 200, "promotion_interval": 50}
TIMEOUT_MS = 300


@pytest.fixture
async def proxy(valkey_server: Any) -> AsyncIterator[FaultProxy]:
    async with FaultProxy((valkey_server.host, valkey_server.port)) as p:
        yield p


async def echo(job: Job[Any, Any]) -> Any:
    return job.data


async def test_silent_connections_are_replaced_once_the_server_answers(
    proxy: FaultProxy, valkey_server: Any, queue_name: str
) -> None:
    through = ConnectionOptions.from_url(proxy.url, request_timeout_ms=TIMEOUT_MS)
    errors: list[BaseException] = []
    async with (
        Queue(queue_name, connection=valkey_server.url) as queue,
        Worker(queue_name, echo, connection=through, **SETTINGS) as worker,
    ):
        worker.on("error", errors.append)
        dog = worker.watchdog
        assert dog.bound == pytest.approx(1.5)
        await queue.add("before", 1)
        await wait_for(lambda: worker.completed_count == 1)

        await asyncio.to_thread(proxy.blackhole)
        await queue.add("during", 2)
        # Unreachable (new connections are swallowed too): a new client could not help.
        await asyncio.sleep(dog.bound * 2)
        assert dog.renewals == 0
        assert dog.fetch_stuck_for() > dog.bound
        assert worker.completed_count == 1

        await asyncio.to_thread(proxy.heal)
        healed = time.monotonic()
        await wait_for(lambda: worker.completed_count == 2, timeout=dog.bound * 2 + 5)
        assert time.monotonic() - healed < dog.bound * 2 + 5
        assert dog.renewals == 1
        assert any("reconnecting" in str(e) for e in errors)
        # every error on the way was a typed glidemq error
        assert all(isinstance(e, glidemq.GlideMQError) for e in errors)

        await queue.add("after", 3)
        await wait_for(lambda: worker.completed_count == 3)
        await queue.obliterate(force=True)
    assert worker.is_running() is False


async def test_a_busy_worker_that_wants_no_jobs_is_left_alone(
    proxy: FaultProxy, valkey_server: Any, queue_name: str
) -> None:
    through = ConnectionOptions.from_url(proxy.url, request_timeout_ms=TIMEOUT_MS)

    async def slow(job: Job[Any, Any]) -> Any:
        await asyncio.sleep(2.5)  # longer than the bound: the fetch loop waits for a slot
        return job.data

    async with (
        Queue(queue_name, connection=valkey_server.url) as queue,
        Worker(queue_name, slow, connection=through, concurrency=1, **SETTINGS) as worker,
    ):
        await queue.add("slow", 1)
        await wait_for(lambda: worker.completed_count == 1, timeout=10)
        assert worker.watchdog.renewals == 0
        await queue.obliterate(force=True)


async def test_queue_replaces_a_silent_client(proxy: FaultProxy, queue_name: str) -> None:
    conn = ConnectionOptions.from_url(
        proxy.url, request_timeout_ms=TIMEOUT_MS, retry=glidemq.RetryPolicy(budget=1.0)
    )
    async with Queue(queue_name, connection=conn) as queue:
        ctx = await queue._context()
        first = ctx.client
        await queue.add("a", 1)
        await asyncio.to_thread(proxy.blackhole)
        with pytest.raises(glidemq.ConnectionError):
            await queue.get_job_counts()
        await asyncio.to_thread(proxy.heal)

        async def counts_again() -> bool:
            try:
                return (await queue.get_job_counts()).waiting == 1
            except glidemq.ConnectionError:
                return False

        await wait_for(counts_again, timeout=10, interval=0.1)
        assert ctx.client is not first
        await queue.obliterate(force=True)


async def test_probe_tells_a_reachable_server_from_a_silent_one(
    proxy: FaultProxy, valkey_server: Any
) -> None:
    conn = ConnectionOptions.from_url(proxy.url)
    assert await probe(conn)
    await asyncio.to_thread(proxy.blackhole)
    assert not await probe(conn, timeout=0.3)
    await asyncio.to_thread(proxy.heal)
    assert await probe(conn)
    # a cluster seed list: any node answering is enough
    dead = ConnectionOptions(
        addresses=(("127.0.0.1", 1), (valkey_server.host, valkey_server.port)), cluster=True
    )
    assert await probe(dead)


async def test_queue_events_replace_a_silent_client(
    proxy: FaultProxy, valkey_server: Any, queue_name: str
) -> None:
    conn = ConnectionOptions.from_url(proxy.url, request_timeout_ms=TIMEOUT_MS)
    seen: list[str | None] = []
    async with (
        Queue(queue_name, connection=valkey_server.url) as queue,
        glidemq.QueueEvents(queue_name, connection=conn, block_timeout=200) as events,
    ):
        events.on("added", lambda ev: seen.append(ev.job_id))
        first = await queue.add("a", 1)
        await wait_for(lambda: seen == [first.id if first else None])
        await asyncio.to_thread(proxy.blackhole)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(proxy.heal)
        second = await queue.add("b", 2)
        assert first is not None and second is not None
        await wait_for(lambda: seen == [first.id, second.id], timeout=10)
        await queue.obliterate(force=True)


async def test_probe_asks_a_server_in_this_process_not_an_address() -> None:
    # glidemq.memory (and the simulator's servers) have no socket: the probe asks the server
    # itself, as a new client would; the address given must not be tried (port 1 refuses)
    from glidemq.memory import MemoryServer

    conn = ConnectionOptions(addresses=(("127.0.0.1", 1),), backend=MemoryServer())
    assert await probe(conn)
