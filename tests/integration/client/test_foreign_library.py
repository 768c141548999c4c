"""A `glidemq` function library that is not this project's (Node glide-mq owns one by the
same name, version 93, with other functions): producers and workers refuse to start with
ForeignLibraryError naming what they found, and leave it untouched. An older version of our
own library is still replaced (upgrade); a newer one of ours is refused as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from glidemq import ConnectionOptions, FlowJob, FlowProducer, LibraryError, Queue, Worker
from glidemq.client.functions import LIBRARY_VERSION
from glidemq.errors import ForeignLibraryError
from glidemq.server.valkey import EmbeddedValkey
from tests.integration.client.test_library import own_library


def foreign(version: str) -> str:
    """A small library named glidemq with its own functions, as another project ships."""
    return (
        "#!lua name=glidemq\n"
        "redis.register_function{function_name='glidemq_version', callback=function() "
        f"return '{version}' end, flags={{'no-writes'}}}}\n"
        "redis.register_function('glidemq_addJob', function(keys, args) return 'node' end)\n"
        "redis.register_function('glidemq_checkConcurrency', function(keys, args) return 0 end)\n"
    )


@pytest.fixture
def own_server() -> Iterator[EmbeddedValkey]:
    """A standalone server for this test only: a foreign library must not touch the
    session server's."""
    server = EmbeddedValkey().start()
    try:
        yield server
    finally:
        server.stop()


def library_code(server: EmbeddedValkey) -> str | None:
    reply: Any = server.execute("FUNCTION", "LIST", "LIBRARYNAME", "glidemq", "WITHCODE")
    for lib in reply:
        fields = dict(zip(lib[::2], lib[1::2], strict=True))
        return str(fields["library_code"])
    return None


@pytest.mark.parametrize("version", ["93", "3", "0.15.4"])
async def test_queue_worker_and_flows_refuse_a_foreign_glidemq_library(
    own_server: EmbeddedValkey, version: str
) -> None:
    src = foreign(version)
    own_server.execute("FUNCTION", "LOAD", src)
    conn = ConnectionOptions.from_url(own_server.url)

    async def noop(job: Any) -> None:
        return None

    q: Queue[Any, Any] = Queue("q", connection=conn)
    try:
        with pytest.raises(ForeignLibraryError) as info:
            await q.add("a", {})
    finally:
        await q.close()
    message = str(info.value)
    assert f"version {version!r}" in message, message
    assert "glidemq_checkConcurrency" in message and "not glidemq for Python" in message
    assert isinstance(info.value, LibraryError)
    with pytest.raises(ForeignLibraryError):
        await Worker("q", noop, connection=conn).start()
    with pytest.raises(ForeignLibraryError):
        async with FlowProducer(connection=conn) as flows:
            await flows.add(FlowJob("p", "q"))
    assert library_code(own_server) == src  # never replaced
    assert own_server.execute("DBSIZE") == 0  # never run on


async def test_older_version_of_our_library_is_still_upgraded(
    own_server: EmbeddedValkey,
) -> None:
    own_server.execute("FUNCTION", "LOAD", own_library(LIBRARY_VERSION - 1, marked=False))
    conn = ConnectionOptions.from_url(own_server.url)
    async with Queue("q", connection=conn) as q:
        job = await q.add("a", {"v": 1})
        assert job is not None
    assert own_server.cli("FCALL", "glidemq_version", "0") == str(LIBRARY_VERSION)
    assert own_server.cli("FCALL", "glidemq_library", "0") == "glidemq-python"


async def test_newer_version_of_our_library_is_refused_not_downgraded(
    own_server: EmbeddedValkey,
) -> None:
    src = own_library(LIBRARY_VERSION + 1, marked=True)
    own_server.execute("FUNCTION", "LOAD", src)
    conn = ConnectionOptions.from_url(own_server.url)
    q: Queue[Any, Any] = Queue("q", connection=conn)
    try:
        with pytest.raises(LibraryError, match="newer") as info:
            await q.add("a", {})
    finally:
        await q.close()
    assert not isinstance(info.value, ForeignLibraryError)
    assert library_code(own_server) == src
