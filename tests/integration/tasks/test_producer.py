"""Producer: one lazily opened connection, add / add_bulk / flows through the Queue's and the
FlowProducer's code, reuse across event loops (asyncio.run per invocation), a connection
killed between calls or during an add, and an idempotent close."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

import glidemq
from glidemq import ConnectionOptions, FlowJob, GlideMQError, Producer, Queue, ValidationError
from tests.helpers import wait_for


def client_names(node: Any) -> list[str]:
    """Names of the clients connected to one node (CLIENT LIST), unnamed ones as ''."""
    names = []
    for line in node.cli("CLIENT", "LIST").splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
        names.append(fields.get("name", ""))
    return names


def producer_clients(server: Any, queue_name: str) -> int:
    return client_names(server).count(f"glidemq-producer-{queue_name}")


def stream_length(server: Any, queue_name: str) -> int:
    return int(server.cli("XLEN", f"glide:{{{queue_name}}}:stream"))


async def test_no_connection_until_the_first_add(valkey_server: Any, queue_name: str) -> None:
    producer: Producer[Any, Any] = Producer(queue_name, connection=valkey_server.url)
    async with producer:  # entering does not connect either
        await asyncio.sleep(0.05)
        assert not producer.connected
        assert producer_clients(valkey_server, queue_name) == 0
        job = await producer.add("first", {"n": 1})
        assert job is not None
        assert producer.connected
        assert producer_clients(valkey_server, queue_name) == 1
    await wait_for(lambda: producer_clients(valkey_server, queue_name) == 0)


def test_bad_arguments_fail_at_construction_without_connecting() -> None:
    with pytest.raises(ValidationError):
        Producer("bad{name}", connection="valkey://127.0.0.1:1")
    with pytest.raises(ValidationError, match="verify_after"):
        Producer("q", connection="valkey://127.0.0.1:1", verify_after=-1)
    with pytest.raises(ValidationError, match="ping_timeout"):
        Producer("q", connection="valkey://127.0.0.1:1", ping_timeout=0)


async def test_add_add_bulk_and_flows_reach_the_queue(
    conn: ConnectionOptions, queue_name: str
) -> None:
    producer: Producer[dict[str, int], Any] = Producer(queue_name, connection=conn)
    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    try:
        one = await producer.add("one", {"n": 1}, {"priority": 3})
        assert one is not None and one.queue_name == queue_name
        bulk = await producer.add_bulk(
            [("b", {"n": 2}), {"name": "c", "data": {"n": 3}, "opts": {"job_id": "c-1"}}]
        )
        assert [j.id if j else None for j in bulk][1] == "c-1"
        # The Queue's validation applies as it is.
        with pytest.raises(ValidationError):
            await producer.add("bad", {}, {"attempts": -1})
        with pytest.raises(ValidationError, match=r"jobs\[1\]"):
            await producer.add_bulk([("ok", 1), ("bad", 2, {"delay": -5})])
        # A custom id that exists: skipped, as Queue.add does.
        assert await producer.add("c", {"n": 3}, {"job_id": "c-1"}) is None

        node = await producer.add_flow(
            FlowJob(
                "parent",
                queue_name,
                {"p": 1},
                children=[FlowJob("kid", queue_name, {"k": 1}), FlowJob("kid", queue_name, {})],
            )
        )
        assert node.job.state == "waiting-children" and len(node.children) == 2
        dag = await producer.add_dag(
            [
                glidemq.DagNode("step", queue_name, {}, key="a"),
                glidemq.DagNode("step", queue_name, {}, depends_on=["a"], key="b"),
            ]
        )
        assert set(dag) == {"a", "b"}
        flows = await producer.add_flows([FlowJob("solo", queue_name, {"s": 1})])
        assert flows[0] is not None

        for job_id in (one.id, "c-1", node.job.id, *(c.job.id for c in node.children)):
            assert await queue.get_job(job_id) is not None
        assert await node.job.get_state() == "waiting-children"
        # A returned job is usable: it talks through the producer's connection.
        assert await one.get_state() in ("waiting", "prioritized")
    finally:
        await producer.close()
        await queue.obliterate(force=True)
        await queue.close()


_TWO_LOOPS = """
import asyncio, sys
from glidemq import Producer
producer = Producer(sys.argv[1])
async def invocation(n):
    job = await producer.add("call", {"n": n})
    return job.id
def clients():  # the producer's connections the server sees
    import os, valkey
    listed = valkey.Valkey.from_url(os.environ["GLIDEMQ_URL"].replace("valkey", "redis", 1))
    return sum(c.get("name") == "glidemq-producer-" + sys.argv[1] for c in listed.client_list())
first = asyncio.run(invocation(1))
second = asyncio.run(invocation(2))
third = asyncio.run(invocation(3))
print(first, second, third, producer.reconnects, producer.connected, clients())
asyncio.run(producer.close())
"""


def test_two_event_loops_in_one_process(valkey_server: Any, queue_name: str) -> None:
    """As a serverless function calling asyncio.run per invocation, in a fresh process: the
    client of the finished loop is closed and a new one is made on the next loop. (Run in a
    child: valkey-glide reads every reply on the first loop that is still open, and the test
    session keeps its own loop open.)"""
    done = subprocess.run(
        [sys.executable, "-c", _TWO_LOOPS, queue_name],
        env={**os.environ, "GLIDEMQ_URL": valkey_server.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, second, third, reconnects, connected, clients = done.stdout.split()
    assert len({first, second, third}) == 3
    # One new connection per new loop, and the old ones closed: no pile-up on the server.
    assert (reconnects, connected, clients) == ("2", "True", "1")
    assert stream_length(valkey_server, queue_name) == 3


async def test_connection_killed_between_calls(valkey_server: Any, queue_name: str) -> None:
    producer: Producer[Any, Any] = Producer(queue_name, connection=valkey_server.url)
    try:
        assert await producer.add("before", {}) is not None
        killed = valkey_server.cli("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert int(killed) >= 1
        # No custom id: the add must go through on a working connection, not fail.
        assert await producer.add("right-after", {}) is not None
        await asyncio.sleep(0.05)
        valkey_server.cli("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert await producer.add("later", {}) is not None
        assert stream_length(valkey_server, queue_name) == 3
    finally:
        await producer.close()


async def test_idle_connection_is_checked_before_the_add(
    valkey_server: Any, queue_name: str
) -> None:
    """After verify_after seconds without a call, a dead connection is replaced first."""
    producer: Producer[Any, Any] = Producer(
        queue_name, connection=valkey_server.url, verify_after=0.0
    )
    try:
        await producer.add("a", {})
        # Close the client under the producer, as a frozen process may find it.
        assert producer._link is not None
        await producer._link.client.close()
        assert await producer.add("b", {}) is not None
        assert producer.reconnects == 1
        assert stream_length(valkey_server, queue_name) == 2
    finally:
        await producer.close()


async def test_a_new_connection_loads_a_library_the_server_lost(
    valkey_server: Any, queue_name: str
) -> None:
    """As after a restart without persistence: add_bulk (a pipeline, which does not reload
    the library itself) works on the next connection."""
    producer: Producer[Any, Any] = Producer(
        queue_name, connection=valkey_server.url, verify_after=0.0
    )
    try:
        await producer.add("a", {})
        assert producer._link is not None
        await producer._link.client.close()  # the next call must connect anew
        valkey_server.cli("FUNCTION", "DELETE", "glidemq")
        added = await producer.add_bulk([("b", {}), ("c", {})])
        assert all(j is not None for j in added)
        assert producer.reconnects == 1
        assert stream_length(valkey_server, queue_name) == 3
    finally:
        await producer.close()


async def test_connection_lost_during_an_add(valkey_server: Any, queue_name: str) -> None:
    """The documented outcome: without a custom id a typed ConnectionError (the add may have
    run, nothing is resent); with one the add is retried, and a retry by the caller finds
    the job (None), so the job exists once."""
    producer: Producer[Any, Any] = Producer(queue_name, connection=valkey_server.url)

    async def kill_during(add: Any) -> Any:
        valkey_server.cli("CLIENT", "PAUSE", "1000", "WRITE")  # holds the FCALL on the server
        try:
            task = asyncio.ensure_future(add)
            await asyncio.sleep(0.2)
            valkey_server.cli("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            return await asyncio.gather(task, return_exceptions=True)
        finally:
            valkey_server.cli("CLIENT", "UNPAUSE")

    try:
        await producer.add("warm-up", {})
        (plain,) = await kill_during(producer.add("plain", {}))
        assert isinstance(plain, glidemq.ConnectionError), plain
        assert "not retried" in str(plain)
        assert not producer.connected  # the next call connects anew
        assert await producer.add("next", {}) is not None

        (custom,) = await kill_during(producer.add("custom", {}, {"job_id": "order-7"}))
        assert not isinstance(custom, BaseException), custom
        assert custom is None or custom.id == "order-7"
        assert await producer.add("custom", {}, {"job_id": "order-7"}) is None
        assert valkey_server.cli("HGET", f"glide:{{{queue_name}}}:job:order-7", "name") == "custom"

        # A flow is one atomic call and is not resent: a typed error, and (the server was
        # paused) nothing of it written.
        flow = FlowJob("root", queue_name, {}, children=[FlowJob("leaf", queue_name, {})])
        (lost_flow,) = await kill_during(producer.add_flow(flow))
        assert isinstance(lost_flow, glidemq.ConnectionError), lost_flow
        assert (await producer.add_flow(flow)).job.state == "waiting-children"
        # warm-up, next, order-7 and the second flow's leaf; the killed plain add and the
        # killed flow never ran (the server was paused)
        assert stream_length(valkey_server, queue_name) == 4
    finally:
        await producer.close()


async def test_close_is_idempotent(valkey_server: Any, queue_name: str) -> None:
    unused: Producer[Any, Any] = Producer(queue_name, connection=valkey_server.url)
    await unused.close()
    await unused.close()  # never connected: nothing to do, no error
    producer: Producer[Any, Any] = Producer(queue_name, connection=valkey_server.url)
    await producer.add("x", {})
    await producer.close()
    await producer.close()
    assert not producer.connected
    with pytest.raises(GlideMQError, match="closed"):
        await producer.add("y", {})
    await wait_for(lambda: producer_clients(valkey_server, queue_name) == 0)
