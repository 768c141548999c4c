"""A refused connection is reported as refused, at once, as a typed error."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

import glidemq
from glidemq import Queue, Worker


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _noop(job: Any) -> None:
    return None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
async def test_refused_connection_says_connection_refused_at_once(
    cluster: bool, queue_name: str
) -> None:
    port = _closed_port()
    url = f"valkey://127.0.0.1:{port}" + ("?cluster=1" if cluster else "")
    queue: Queue[Any, Any] = Queue(queue_name, connection=url)
    started = time.monotonic()
    with pytest.raises(glidemq.ConnectionError) as info:
        await queue.add("x", 1)
    elapsed = time.monotonic() - started
    await queue.close()
    message = str(info.value)
    assert "connection refused" in message.lower(), message
    assert "timed out" not in message
    assert message == message.strip()
    assert f"127.0.0.1:{port}" in message
    assert elapsed < 1.5, f"took {elapsed:.1f} s to report a refused connection"

    worker: Worker[Any, Any] = Worker(queue_name, _noop, connection=url)
    with pytest.raises(glidemq.ConnectionError, match=r"(?i)connection refused"):
        await worker.start()
    await worker.close()
