"""The `glidemq` function library on the server: loading, reloading after loss, versions.

Tests that replace the library with a foreign one, or restart the server, use a server of
their own so the shared session servers keep the real library.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    FlowJob,
    FlowProducer,
    GlideMQError,
    Job,
    LibraryError,
    Queue,
    Worker,
)
from glidemq.client.connection import close_client, create_client
from glidemq.client.functions import LIBRARY_VERSION, ensure_library, library_source
from glidemq.server.valkey import EmbeddedValkey, parse_info
from tests.helpers import wait_for

# Another project's library by the same name: refused (tests/integration/client/
# test_foreign_library.py).
FAKE_NEWER = (
    "#!lua name=glidemq\nredis.register_function{function_name='glidemq_version', "
    "callback=function() return '999' end, flags={'no-writes'}}"
)


def own_library(version: int, marked: bool) -> str:
    """This project's library at another version; `marked=False` as before version 11,
    which added the marker function `glidemq_library`."""
    src = re.sub(
        r"local LIBRARY_VERSION = '\d+'", f"local LIBRARY_VERSION = '{version}'", library_source()
    )
    if not marked:
        start = src.index("redis.register_function{function_name = 'glidemq_library'")
        end = src.index("end, flags = {'no-writes'}}", start) + len("end, flags = {'no-writes'}}")
        src = src[:start] + src[end:]
    return src


@pytest.fixture
def primaries(conn: ConnectionOptions, request: pytest.FixtureRequest) -> list[Any]:
    """Every primary of the server behind `conn` (objects with `.cli(...)`)."""
    if conn.cluster:
        return list(request.getfixturevalue("valkey_cluster").primaries())
    return [request.getfixturevalue("valkey_server")]


@pytest.fixture
def own_server() -> Iterator[EmbeddedValkey]:
    """A standalone server for this test only (no persistence)."""
    server = EmbeddedValkey().start()
    try:
        yield server
    finally:
        server.stop()


def version_on(node: Any) -> str | None:
    """The library version a node reports, or None when it has no glidemq library.

    `FCALL glidemq_version 0` names no key, so any primary of a cluster answers it itself.
    """
    if "glidemq" not in node.cli("FUNCTION", "LIST", "LIBRARYNAME", "glidemq"):
        return None
    return str(node.cli("FCALL", "glidemq_version", "0"))


# --------------------------------------------------------------------------- lost library


async def test_deleted_library_is_reloaded_by_the_next_add(
    queue: Queue[Any, Any], primaries: list[Any]
) -> None:
    for node in primaries:
        node.cli("FUNCTION", "DELETE", "glidemq")
    assert [version_on(n) for n in primaries] == [None] * len(primaries)

    job = await queue.add("after-delete", {"n": 1})
    assert job is not None
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.data == {"n": 1} and stored.state == "waiting"
    assert [version_on(n) for n in primaries] == [str(LIBRARY_VERSION)] * len(primaries)


async def test_deleted_library_is_reloaded_by_a_bulk_add_and_a_flow(
    queue: Queue[Any, Any], conn: ConnectionOptions, primaries: list[Any]
) -> None:
    # both send their calls as one pipeline; every call answered "no such function"
    for node in primaries:
        node.cli("FUNCTION", "DELETE", "glidemq")
    jobs = await queue.add_bulk([("bulk", {"i": i}) for i in range(2500)])
    assert len(jobs) == 2500 and all(j is not None for j in jobs)
    assert (await queue.get_job_counts()).waiting == 2500
    assert [version_on(n) for n in primaries] == [str(LIBRARY_VERSION)] * len(primaries)

    for node in primaries:
        node.cli("FUNCTION", "DELETE", "glidemq")
    async with FlowProducer(connection=conn) as flows:
        node_ = await flows.add(
            FlowJob("parent", queue.name, {}, children=[FlowJob("child", queue.name, {})])
        )
    parent = await queue.get_job(node_.job.id)
    assert parent is not None and parent.state == "waiting-children"
    assert [version_on(n) for n in primaries] == [str(LIBRARY_VERSION)] * len(primaries)


async def test_flushed_library_is_reloaded_by_a_running_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions, primaries: list[Any]
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def hold(job: Job[Any, Any]) -> str:
        started.set()
        await release.wait()
        return "finished"

    job = await queue.add("held", None)
    assert job is not None
    async with Worker(queue.name, hold, connection=conn) as worker:
        await asyncio.wait_for(started.wait(), 10)
        for node in primaries:
            node.cli("FUNCTION", "FLUSH")
        assert [version_on(n) for n in primaries] == [None] * len(primaries)
        # The worker's completion is the next FCALL: it must reload the library and succeed.
        release.set()
        await wait_for(lambda: worker.completed_count == 1)
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.state == "completed"
    assert stored.returnvalue == "finished"
    assert [version_on(n) for n in primaries] == [str(LIBRARY_VERSION)] * len(primaries)


async def test_queue_and_worker_keep_working_after_server_restart(
    own_server: EmbeddedValkey, queue_name: str
) -> None:
    conn = ConnectionOptions.from_url(own_server.url)
    done: list[int] = []

    async def process(job: Job[int, int]) -> int:
        done.append(job.data)
        return job.data * 10

    run_id = parse_info(own_server.execute("INFO", "server"))["run_id"]
    async with (
        Queue(queue_name, connection=conn) as q,
        Worker(queue_name, process, connection=conn, block_timeout=500) as worker,
    ):
        await q.add("before", 1)
        await wait_for(lambda: done == [1])

        # No persistence: the restart loses every key, the consumer group and the library.
        await asyncio.to_thread(own_server.restart)
        assert parse_info(own_server.execute("INFO", "server"))["run_id"] != run_id

        async def add_after() -> Any:
            try:
                return await q.add("after", 2)
            except GlideMQError:
                return None  # still reconnecting

        job = await wait_for(add_after, timeout=20)
        await wait_for(lambda: done == [1, 2], timeout=20)
        await wait_for(lambda: worker.completed_count == 2, timeout=10)
        stored = await q.get_job(job.id)
        assert stored is not None and stored.state == "completed" and stored.returnvalue == 20
    assert own_server.cli("FCALL", "glidemq_version", "0") == str(LIBRARY_VERSION)


# --------------------------------------------------------------------------- cluster


async def test_cluster_queue_loads_the_library_on_every_primary(
    valkey_cluster: Any, queue_name: str
) -> None:
    nodes = valkey_cluster.primaries()
    conn = ConnectionOptions(addresses=tuple(valkey_cluster.addresses), cluster=True)
    for node in nodes:
        node.cli("FUNCTION", "DELETE", "glidemq")
    assert [version_on(n) for n in nodes] == [None] * len(nodes)
    async with Queue(queue_name, connection=conn) as q:
        assert [version_on(n) for n in nodes] == [str(LIBRARY_VERSION)] * len(nodes)
        # Lost on one primary only: the next connecting client restores it there too.
        nodes[-1].cli("FUNCTION", "DELETE", "glidemq")
        async with Queue(queue_name, connection=conn):
            assert [version_on(n) for n in nodes] == [str(LIBRARY_VERSION)] * len(nodes)
        await q.obliterate(force=True)


# --------------------------------------------------------------------------- many clients


@pytest.mark.parametrize("mode", ["standalone", "cluster"])
async def test_20_clients_ensure_library_at_once_after_flush(
    mode: str, request: pytest.FixtureRequest
) -> None:
    if mode == "standalone":
        server = request.getfixturevalue("own_server")
        nodes: list[Any] = [server]
        opts = ConnectionOptions.from_url(server.url)
    else:
        cluster = request.getfixturevalue("valkey_cluster")
        nodes = list(cluster.primaries())
        opts = ConnectionOptions(addresses=tuple(cluster.addresses), cluster=True)
    for node in nodes:
        node.cli("FUNCTION", "FLUSH")
    clients = await asyncio.gather(*(create_client(opts) for _ in range(20)))
    try:
        results = await asyncio.gather(
            *(ensure_library(c) for c in clients), return_exceptions=True
        )
        assert results == [None] * 20
    finally:
        await asyncio.gather(*(close_client(c) for c in clients))
    for node in nodes:
        listing = node.cli("FUNCTION", "LIST")
        assert listing.count("glidemq_addJob") == 1  # one library, one copy of each function
        assert version_on(node) == str(LIBRARY_VERSION)


# --------------------------------------------------------------------------- versions


async def test_newer_library_on_server_raises_library_error(own_server: EmbeddedValkey) -> None:
    own_server.execute("FUNCTION", "LOAD", "REPLACE", FAKE_NEWER)
    opts = ConnectionOptions.from_url(own_server.url)
    client = await create_client(opts)
    try:
        with pytest.raises(LibraryError, match="999"):
            await ensure_library(client)
        with pytest.raises(LibraryError, match="999"):
            async with Queue("newer", connection=opts):
                pass
        # The newer library is left alone, never downgraded.
        assert own_server.cli("FCALL", "glidemq_version", "0") == "999"
    finally:
        await close_client(client)
        own_server.execute("FUNCTION", "DELETE", "glidemq")


async def test_older_library_on_server_is_replaced(own_server: EmbeddedValkey) -> None:
    own_server.execute("FUNCTION", "LOAD", "REPLACE", own_library(0, marked=False))
    opts = ConnectionOptions.from_url(own_server.url)
    async with Queue("older", connection=opts) as q:
        assert own_server.cli("FCALL", "glidemq_version", "0") == str(LIBRARY_VERSION)
        job = await q.add("works", {"ok": True})
        assert job is not None
        stored = await q.get_job(job.id)
        assert stored is not None and stored.data == {"ok": True}
