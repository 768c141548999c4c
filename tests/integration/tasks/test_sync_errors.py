"""A sync add whose connection is lost on its way names its queue in the ConnectionError
(it named the client, `glidemq-queue-<queue>`). The fault is real: a TCP proxy between
the client and the session's Valkey swallows the add and then resets the connection."""

from __future__ import annotations

import asyncio

import pytest

import glidemq.sync as gs
from glidemq import ConnectionError
from glidemq.chaos.proxy import FaultProxy
from tests.conftest import ValkeyAddress
from tests.helpers import wait_for


async def test_a_lost_direct_add_names_its_queue(
    valkey_server: ValkeyAddress, queue_name: str
) -> None:
    with FaultProxy((valkey_server.host, valkey_server.port)) as proxy:
        queue: gs.Queue = gs.Queue(queue_name, connection=proxy.url, timeout=30)
        try:
            for i in range(2):  # the first connects the queue, the second the direct client
                await asyncio.to_thread(queue.add, "warm", {"i": i})
            proxy.blackhole()
            add = asyncio.ensure_future(asyncio.to_thread(queue.add, "lost", {}))
            await wait_for(lambda: proxy.status()["swallowed"] > 0, timeout=20)
            proxy.reset()
            with pytest.raises(ConnectionError) as caught:
                await add
            text = str(caught.value)
            assert f"on queue {queue_name!r}" in text, text
            assert "glidemq-queue-" not in text
        finally:
            proxy.heal()
            await asyncio.to_thread(queue.close)
