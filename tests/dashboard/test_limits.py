"""The dashboard's resources per caller are bounded, against the real `glidemq-dashboard`
process: its live feeds past `--max-streams` get 503 with Retry-After while pages go on, and
a client that trickles its request headers is answered 408 and disconnected after the
header timeout instead of holding its connection; the proxy has the same timeout."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import ValkeyAddress
from tests.helpers import open_stream, wait_for
from tests.proxy.conftest import running_proxy

from .conftest import Populated, running_dashboard

pytestmark = pytest.mark.slow


async def test_live_feeds_past_max_streams_get_503_and_pages_go_on(populated: Populated) -> None:
    args = ("--prefix", populated.prefix, "--max-streams", "2", "--refresh", "0.5")
    with running_dashboard(populated.url, *args) as (base, _):
        feeds = [await open_stream(base, "/live") for _ in range(2)]
        try:
            assert [f.status for f in feeds] == [200, 200]
            for f in feeds:
                await f.until("event: snapshot")
            refused = await open_stream(base, "/live")
            await refused.close()
            assert refused.status == 503
            assert refused.headers["retry-after"] == "5"
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                assert (await http.get("/")).status_code == 200
            await feeds.pop().close()  # a closed feed gives its place back at once

            async def admitted() -> bool:
                f = await open_stream(base, "/live")
                await f.close()
                return f.status == 200

            await wait_for(admitted, timeout=30, interval=0.2)
        finally:
            for f in feeds:
                await f.close()


async def _trickled(base: str, limit: float) -> bytes:
    """Open a connection, send the start of a request and a byte a second, never the end
    of the headers; what the server answered once it closed the connection."""
    where = urlsplit(base)
    assert where.hostname is not None and where.port is not None
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await writer.drain()
    answer = b""
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            try:
                chunk = await asyncio.wait_for(reader.read(4096), 1.0)
            except TimeoutError:
                writer.write(b"X")  # one more byte of a header line that never ends
                await writer.drain()
                continue
            if not chunk:
                return answer  # closed by the server
            answer += chunk
    except ConnectionError:
        return answer
    finally:
        writer.close()
    raise AssertionError(f"the connection was still open after {limit} s: {answer!r}")


async def test_the_dashboard_closes_a_connection_whose_headers_trickle(
    populated: Populated,
) -> None:
    # the default timeout (10 s); the wait allows for a busy machine
    with running_dashboard(populated.url, "--prefix", populated.prefix) as (base, _):
        answer = await _trickled(base, limit=40)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.get("/")).status_code == 200


async def test_the_proxy_closes_a_connection_whose_headers_trickle(
    valkey_server: ValkeyAddress,
) -> None:
    with running_proxy(valkey_server.url, "--header-timeout", "1") as (base, _):
        answer = await _trickled(base, limit=20)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.get("/health")).status_code == 200
        # a long answer is not a slow request: an event stream stays open past the timeout
        stream = await open_stream(base, "/queues/slow/events")
        try:
            await stream.until("event: ready")
            await asyncio.sleep(2.5)  # past the header timeout, on purpose
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                r = await http.post("/queues/slow/jobs", json={"name": "x", "data": {}})
                assert r.status_code == 201
            await stream.until("event: added")
        finally:
            await stream.close()
