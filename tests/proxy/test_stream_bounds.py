"""The proxy's event streams are bounded, against the real `glidemq-proxy` process and real
streams: the streams of one queue (its events and its jobs' output) share one server
connection, and a broadcast subscription's streams one consumer; past `--max-streams` a
stream gets 503 with Retry-After; under a low file-descriptor limit the proxy refuses
streams with 503 and one warning line, never a traceback, while `/health` and adds go on."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from glidemq import Job, Queue, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, Stream, open_stream, wait_for

from .conftest import running_proxy

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def collected(proc: subprocess.Popen[str]) -> Iterator[list[str]]:
    """The lines the process writes to stderr, read by a thread (a full pipe would stall
    it); complete once the process has exited."""
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=20)
        reader.join(timeout=10)


def feed_clients(server: ValkeyAddress, prefix: str = "glidemq-proxy-feed-") -> list[str]:
    """Names of the server's clients whose name starts with `prefix`."""
    names = []
    for line in server.cli("CLIENT", "LIST").splitlines():
        fields = dict(part.partition("=")[::2] for part in line.split())
        if fields.get("name", "").startswith(prefix):
            names.append(fields["name"])
    return names


@contextlib.asynccontextmanager
async def streams_closed(streams: list[Stream]) -> AsyncIterator[list[Stream]]:
    try:
        yield streams
    finally:
        await asyncio.gather(*(s.close() for s in streams))


async def test_the_streams_of_one_queue_share_one_server_connection(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    gate = asyncio.Event()

    async def talk(job: Job[Any, Any]) -> str:
        await gate.wait()
        await job.stream({"word": "hello"})
        return "done"

    async with Queue("shared", connection=valkey_server.url, prefix=prefix) as queue:
        job = await queue.add("talk", {})
        assert job is not None
        with (
            running_proxy(valkey_server.url, "--prefix", prefix) as (base, proc),
            collected(proc) as errors,
        ):
            events = [await open_stream(base, "/queues/shared/events") for _ in range(150)]
            outputs = [
                await open_stream(base, f"/queues/shared/jobs/{job.id}/stream") for _ in range(20)
            ]
            async with streams_closed(events + outputs):
                assert {s.status for s in events + outputs} == {200}
                for s in events + outputs:
                    await s.until("event: ready")
                # 170 streams of one queue: one connection reads for all of them
                assert feed_clients(valkey_server) == ["glidemq-proxy-feed-shared"]
                async with Worker(
                    "shared", talk, connection=valkey_server.url, prefix=prefix, **FAST
                ):
                    gate.set()
                    for s in events:  # every listener gets every event
                        await s.until("event: completed")
                    for s in outputs:  # every follower gets the chunk, then the end
                        text = await s.until('"state":')
                        assert '"word":"hello"' in text and "completed" in text
            # the last stream gone, its feed closes
            await wait_for(lambda: not feed_clients(valkey_server), timeout=30)
    assert not [line for line in errors if "Traceback" in line], "".join(errors)


async def test_a_broadcast_subscriptions_streams_share_one_consumer(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    path = "/broadcasts/news/subscriptions/readers/events"
    with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
        streams = [await open_stream(base, path) for _ in range(10)]
        async with streams_closed(streams):
            for s in streams:
                assert s.status == 200
                await s.until("event: ready")
            # one forwarding connection for the subscription, not one per stream
            assert len(feed_clients(valkey_server, "glidemq-bc-news@readers")) == 1
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                r = await http.post("/broadcasts/news/messages", json={"name": "n", "data": 1})
                assert r.status_code == 201
            got = await asyncio.wait(
                [asyncio.ensure_future(s.until("event: message")) for s in streams],
                timeout=30,
                return_when=asyncio.FIRST_COMPLETED,
            )
            assert got[0], "no stream received the message"
            for pending in got[1]:
                pending.cancel()
        await wait_for(lambda: not feed_clients(valkey_server, "glidemq-bc-news@"), timeout=30)


async def test_a_stream_past_max_streams_gets_503_with_retry_after(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    with (
        running_proxy(valkey_server.url, "--prefix", prefix, "--max-streams", "3") as (
            base,
            proc,
        ),
        collected(proc) as errors,
    ):
        streams = [await open_stream(base, f"/queues/q{i}/events") for i in range(3)]
        async with streams_closed(streams):
            assert [s.status for s in streams] == [200, 200, 200]
            refused = await open_stream(base, "/queues/q9/events")
            await refused.close()
            assert refused.status == 503
            assert refused.headers["retry-after"] == "5"
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                assert (await http.get("/health")).status_code == 200
                r = await http.post("/queues/q9/jobs", json={"name": "x", "data": {}})
                assert r.status_code == 201
                await streams.pop().close()  # a closed stream gives its place back at once

                async def admitted() -> bool:
                    s = await open_stream(base, "/queues/q9/events")
                    await s.close()
                    return s.status == 200

                await wait_for(admitted, timeout=30, interval=0.2)
    assert not [line for line in errors if "Traceback" in line], "".join(errors)


async def test_out_of_file_descriptors_is_a_503_and_one_warning_not_a_traceback(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    # 256 descriptors for the whole proxy and the default cap of 256 streams: the
    # descriptors run out first, on streams of many queues (each queue's feed needs a
    # server connection).
    with (
        running_proxy(valkey_server.url, "--prefix", prefix, nofile=256) as (base, proc),
        collected(proc) as errors,
    ):
        streams: list[Stream] = []
        on_fd1: list[Stream] = []
        async with streams_closed(streams):
            statuses: dict[int, int] = {}
            for i in range(400):
                s = await open_stream(base, f"/queues/fd{i % 20}/events")
                statuses[s.status] = statuses.get(s.status, 0) + 1
                if s.status != 200:
                    assert s.headers["retry-after"] == "5"
                    await s.close()
                    continue
                streams.append(s)
                await s.until("event: ready")
                if i % 20 == 1:
                    on_fd1.append(s)
            assert statuses.get(200, 0) > 20 and statuses.get(503, 0) > 0, statuses
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                assert (await http.get("/health")).status_code == 200
                r = await http.post("/queues/fd1/jobs", json={"name": "x", "data": {}})
                assert r.status_code == 201, r.text
                job_id = r.json()["job"]["id"]
            for s in on_fd1:  # the open streams still work
                seen = await s.until(f'"job_id":"{job_id}"')
                assert "event: added" in seen
            # at most one server connection per queue with streams
            assert len(feed_clients(valkey_server)) <= 20
    text = "".join(errors)
    assert "Traceback" not in text, text[:4000]
    warnings = [line for line in errors if "out of file descriptors" in line]
    assert len(warnings) == 1, text[:4000]
    assert len(errors) == 1, text[:4000]
