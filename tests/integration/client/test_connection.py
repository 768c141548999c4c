"""Connections: the GLIDEMQ_URL fallback, unreachable servers, the worker's dedicated
blocking client, surviving a server restart, and leaving no clients behind on close."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from glide import AdvancedGlideClientConfiguration

import glidemq
from glidemq import ConnectionOptions, Job, Queue, QueueEvents, Worker
from glidemq.server.valkey import EmbeddedValkey, free_port
from tests.helpers import wait_for


async def succeed(job: Job[Any, Any]) -> Any:
    return job.data


def client_names(node: Any) -> list[str]:
    """Names of the clients connected to one node (CLIENT LIST), unnamed ones as ''."""
    names = []
    for line in str(node.execute("CLIENT", "LIST")).splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        names.append(fields.get("name", ""))
    return names


@pytest.fixture
def own_server() -> Iterator[EmbeddedValkey]:
    """A standalone Valkey of this test alone (it may be restarted or inspected freely)."""
    server = EmbeddedValkey().start()
    try:
        yield server
    finally:
        server.stop()


# =========================================================================== configuration


async def test_glidemq_url_is_used_when_no_connection_is_given(
    conn: ConnectionOptions, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLIDEMQ_URL", conn.url)
    async with Queue(queue_name) as queue:
        assert queue.connection == conn
        job = await queue.add("from-env", {"ok": 1})
        assert job is not None
        worker: Worker[Any, Any] = Worker(queue_name, succeed)
        assert worker.connection == conn
        async with worker:
            await wait_for(lambda: worker.completed_count == 1)
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.returnvalue == {"ok": 1}
        await queue.obliterate(force=True)


# =========================================================================== unreachable server


@pytest.mark.timeout(60)
async def test_closed_port_raises_glidemq_connection_error(queue_name: str) -> None:
    url = f"valkey://127.0.0.1:{free_port()}"  # nothing listens there
    queue: Queue[Any, Any] = Queue(queue_name, connection=url)
    with pytest.raises(glidemq.ConnectionError) as info:
        await queue.add("x", 1)
    assert isinstance(info.value, glidemq.GlideMQError)
    assert url.removeprefix("valkey://") in str(info.value)
    await queue.close()

    # glide waits up to its connection timeout for each attempt; shorten it for the rest
    fast = ConnectionOptions.from_url(
        url, extra={"advanced_config": AdvancedGlideClientConfiguration(connection_timeout=300)}
    )
    worker: Worker[Any, Any] = Worker(queue_name, succeed, connection=fast)
    with pytest.raises(glidemq.ConnectionError):
        await worker.start()
    await worker.close()

    events = QueueEvents(queue_name, connection=fast)
    with pytest.raises(glidemq.ConnectionError):
        await events.start()
    await events.close()


@pytest.mark.timeout(60)
async def test_worker_start_can_be_retried_once_the_server_is_up(queue_name: str) -> None:
    server = EmbeddedValkey()  # port chosen, not started yet
    try:
        fast = ConnectionOptions.from_url(
            server.url,
            extra={"advanced_config": AdvancedGlideClientConfiguration(connection_timeout=300)},
        )
        worker: Worker[Any, Any] = Worker(queue_name, succeed, connection=fast)
        with pytest.raises(glidemq.ConnectionError):
            await worker.start()
        assert not worker.is_running()
        await asyncio.to_thread(server.start)
        async with Queue(queue_name, connection=server.url) as queue:
            await worker.start()
            try:
                assert worker.is_running()
                job = await queue.add("x", 1)
                assert job is not None
                await wait_for(lambda: worker.completed_count == 1)
            finally:
                await worker.close()
    finally:
        await asyncio.to_thread(server.stop)


@pytest.mark.timeout(60)
async def test_closed_cluster_ports_raise_glidemq_connection_error(queue_name: str) -> None:
    url = f"valkey://127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    queue: Queue[Any, Any] = Queue(queue_name, connection=url)
    assert queue.connection.cluster
    with pytest.raises(glidemq.ConnectionError):
        await queue.get_job_counts()
    await queue.close()


@pytest.mark.timeout(60)
async def test_server_gone_mid_session_raises_connection_error(
    own_server: EmbeddedValkey, queue_name: str
) -> None:
    # reads are retried for the retry budget before they give up: keep it short here
    conn = ConnectionOptions.from_url(
        own_server.url, request_timeout_ms=500, retry=glidemq.RetryPolicy(budget=1.0)
    )
    async with Queue(queue_name, connection=conn) as queue:
        job = await queue.add("before", 1)
        assert job is not None
        own_server.kill()
        # FCALL-based and plain commands alike surface as glidemq.ConnectionError
        with pytest.raises(glidemq.ConnectionError):
            await queue.add("after", 2)
        with pytest.raises(glidemq.ConnectionError):
            await queue.get_job(job.id)
        with pytest.raises(glidemq.ConnectionError):
            await queue.get_job_logs(job.id)


# =========================================================================== blocking client


async def test_blocking_read_does_not_stall_the_workers_other_commands(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    block_ms = 5000
    drained = asyncio.Event()
    worker: Worker[Any, Any] = Worker(queue.name, succeed, connection=conn, block_timeout=block_ms)
    worker.on("drained", lambda: drained.set())
    async with worker:
        await asyncio.wait_for(drained.wait(), 10)
        await asyncio.sleep(0.1)  # the XREADGROUP BLOCK is now under way on its own client
        job = await queue.add("soon", 1, {"delay": 200})
        assert job is not None
        # The promotion of the delayed job runs on the command client while the blocking
        # read waits; the job must finish well before the 5 s block would have ended.
        await wait_for(lambda: worker.completed_count == 1, timeout=block_ms / 1000 - 2)
    assert await job.is_completed()


async def test_job_commands_inside_a_processor_run_while_idle_peers_block(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def chatty(job: Job[Any, Any]) -> str:
        await job.log("working")
        await job.update_progress(50)
        return "ok"

    # concurrency 2: one slot runs the job while the other one waits in a blocking read
    async with Worker(
        queue.name, chatty, connection=conn, concurrency=2, prefetch=1, block_timeout=5000
    ) as worker:
        job = await queue.add("one", 1)
        assert job is not None
        await wait_for(lambda: worker.completed_count == 1, timeout=3)
    assert await queue.get_job_logs(job.id) == (["working"], 1)
    assert (await job.refresh()).progress == 50


# =========================================================================== restarts


@pytest.mark.timeout(120)
async def test_queue_and_worker_survive_a_server_restart(
    own_server: EmbeddedValkey, queue_name: str
) -> None:
    done: list[Any] = []

    async def record(job: Job[Any, Any]) -> Any:
        done.append(job.data)
        return job.data

    async with (
        Queue(queue_name, connection=own_server.url) as queue,
        Worker(queue_name, record, connection=own_server.url, block_timeout=1000) as worker,
    ):
        await queue.add("before", "before")
        await wait_for(lambda: done == ["before"])

        await asyncio.to_thread(own_server.restart)  # data and function library are gone

        async def add_after_restart() -> bool:
            try:
                await queue.add("after", "after-1")
            except glidemq.ConnectionError:
                return False  # still reconnecting
            return True

        await wait_for(add_after_restart, timeout=30, interval=0.2)
        await queue.add_bulk([("after", f"after-{i}") for i in range(2, 6)])
        await wait_for(lambda: len(done) == 6, timeout=30)
        assert worker.is_running()
        assert not any(t.done() for t in worker._tasks), "a worker loop died"
        assert sorted(done[1:]) == [f"after-{i}" for i in range(1, 6)]
        assert (await queue.get_job_counts()).completed == 5


# =========================================================================== clean close


async def test_clean_close_leaves_no_client_on_the_server(
    own_server: EmbeddedValkey, queue_name: str
) -> None:
    baseline = client_names(own_server)  # just the CLIENT LIST connection itself
    queue: Queue[Any, Any] = Queue(queue_name, connection=own_server.url)
    await queue.add("x", 1)
    worker: Worker[Any, Any] = Worker(queue_name, succeed, connection=own_server.url)
    await worker.start()
    events = QueueEvents(queue_name, connection=own_server.url)
    await events.start()
    await wait_for(lambda: worker.completed_count == 1)
    during = [n for n in client_names(own_server) if n.startswith("glidemq")]
    assert len(during) == 4, during  # queue, worker command + blocking, events

    await events.close()
    await worker.close()
    await queue.close()

    await wait_for(lambda: len(client_names(own_server)) == len(baseline))
    assert [n for n in client_names(own_server) if n.startswith("glidemq")] == []


async def test_close_releases_every_named_client_in_both_modes(
    conn: ConnectionOptions, queue_name: str, request: pytest.FixtureRequest
) -> None:
    nodes: list[Any] = (
        request.getfixturevalue("valkey_cluster").nodes
        if conn.cluster
        else [request.getfixturevalue("valkey_server")]
    )

    def ours() -> list[str]:
        return [n for node in nodes for n in client_names(node) if queue_name in n]

    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    await queue.add("x", 1)
    worker: Worker[Any, Any] = Worker(
        queue_name, succeed, connection=conn, consumer=f"{queue_name}-c"
    )
    await worker.start()
    events = QueueEvents(queue_name, connection=conn)
    await events.start()
    await wait_for(lambda: worker.completed_count == 1)
    expected = {
        f"glidemq-queue-{queue_name}",
        f"glidemq-{queue_name}-c",
        f"glidemq-{queue_name}-c-b",
        f"glidemq-events-{queue_name}",
    }
    assert set(ours()) == expected

    await events.close()
    await worker.close()
    await queue.obliterate(force=True)
    await queue.close()
    await wait_for(lambda: ours() == [])
