"""Connection and queue fixtures; core tests run against standalone and cluster Valkey."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from glidemq import ConnectionOptions, Queue


@pytest.fixture(params=["standalone", "cluster"])
def conn(request: pytest.FixtureRequest) -> ConnectionOptions:
    """Connection options for the session's standalone server or its 3+3 cluster."""
    if request.param == "standalone":
        server = request.getfixturevalue("valkey_server")
        return ConnectionOptions.from_url(server.url)
    cluster = request.getfixturevalue("valkey_cluster")
    return ConnectionOptions(addresses=tuple(cluster.addresses), cluster=True)


@pytest.fixture
def standalone_conn(valkey_server: Any) -> ConnectionOptions:
    """Connection options for the standalone server only."""
    return ConnectionOptions.from_url(valkey_server.url)


@pytest.fixture
async def queue(conn: ConnectionOptions, queue_name: str) -> AsyncIterator[Queue[Any, Any]]:
    """A connected Queue with a unique name, obliterated afterwards."""
    q: Queue[Any, Any] = Queue(queue_name, connection=conn)
    await q._context()
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()
