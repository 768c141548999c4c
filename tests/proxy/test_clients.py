"""Clients in other languages use glidemq through the real `glidemq-proxy` process: Node
(the built-in `fetch`, no library) and `curl` each follow the queue's events over SSE, add a
job with add-and-wait, a Python Worker completes it, and the caller gets its result while
the SSE client sees the job's events. Also: the console script binds loopback by default
and refuses bad input with exit 2 and one line; the broadcast stream filters by subject;
curl follows a job's output stream live and resumes it with `Last-Event-ID`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psutil
import pytest

from glidemq import Broadcast, Job, Queue, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from .conftest import JSON, REPO_ROOT, proxy_argv, running_proxy

NODE_CLIENT = r"""
const base = process.env.PROXY_BASE, queue = process.env.PROXY_QUEUE;
const seen = [];
let ready, done;
const isReady = new Promise((r) => (ready = r));
const isDone = new Promise((r) => (done = r));
const ac = new AbortController();
(async () => {
  const res = await fetch(`${base}/queues/${queue}/events`, { signal: ac.signal });
  const reader = res.body.getReader();
  const text = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buf += text.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const ev = /^event: (.*)$/m.exec(frame);
      const data = /^data: (.*)$/m.exec(frame);
      if (!ev) continue;
      seen.push({ event: ev[1], data: data ? JSON.parse(data[1]) : null });
      if (ev[1] === "ready") ready();
      if (ev[1] === "completed") done();
    }
  }
})().catch((e) => { if (e.name !== "AbortError") { console.error(e); process.exit(3); } });
await isReady;
const res = await fetch(`${base}/queues/${queue}/jobs/wait`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ name: "square", data: { n: 7 }, timeout: 60 }),
});
const body = await res.json();
await Promise.race([isDone, new Promise((r) => setTimeout(r, 30000))]);
ac.abort();
console.log(JSON.stringify({ status: res.status, body, events: seen }));
process.exit(0);
"""


async def square(job: Job[Any, Any]) -> Any:
    return {"square": job.data["n"] ** 2, "by": "python"}


@pytest.fixture
async def squaring_worker(valkey_server: ValkeyAddress, prefix: str) -> AsyncIterator[str]:
    """A Python Worker completing jobs of queue `squares` under the test's prefix."""
    async with Worker("squares", square, connection=valkey_server.url, prefix=prefix, **FAST):
        yield "squares"


def _need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed on this machine")
    return path


async def test_node_fetch_adds_waits_and_follows_events(
    valkey_server: ValkeyAddress, prefix: str, squaring_worker: str
) -> None:
    node = _need("node")
    with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
        env = {**os.environ, "PROXY_BASE": base, "PROXY_QUEUE": squaring_worker}
        proc = await asyncio.create_subprocess_exec(
            node,
            "--input-type=module",
            "-e",
            NODE_CLIENT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["status"] == 200
    assert report["body"] == {"result": {"square": 49, "by": "python"}}
    events = [e for e in report["events"] if e["event"] != "ready"]
    job_ids = {e["data"]["job_id"] for e in events if e["event"] == "completed"}
    assert len(job_ids) == 1
    kinds = [e["event"] for e in events if e["data"]["job_id"] in job_ids]
    assert "added" in kinds and kinds[-1] == "completed"


async def _read_until(stream: asyncio.StreamReader, needle: str, sink: list[str]) -> None:
    """Read lines into `sink` until the frame holding `needle` is complete."""
    while not (needle in "".join(sink) and sink[-1] == "\n"):
        line = await stream.readline()
        if not line:
            raise AssertionError(f"stream ended before {needle!r}: {''.join(sink)}")
        sink.append(line.decode())


async def test_curl_adds_waits_and_follows_events(
    valkey_server: ValkeyAddress, prefix: str, squaring_worker: str
) -> None:
    curl = _need("curl")
    with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
        sse = await asyncio.create_subprocess_exec(
            curl, "-sN", f"{base}/queues/{squaring_worker}/events", stdout=subprocess.PIPE
        )
        assert sse.stdout is not None
        frames: list[str] = []
        try:
            await asyncio.wait_for(_read_until(sse.stdout, "event: ready", frames), 30)
            add = await asyncio.create_subprocess_exec(
                curl,
                "-s",
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "-d",
                json.dumps({"name": "square", "data": {"n": 12}, "timeout": 60}),
                f"{base}/queues/{squaring_worker}/jobs/wait",
                stdout=subprocess.PIPE,
            )
            out, _ = await asyncio.wait_for(add.communicate(), timeout=90)
            assert json.loads(out) == {"result": {"square": 144, "by": "python"}}
            await asyncio.wait_for(_read_until(sse.stdout, "event: completed", frames), 30)
        finally:
            sse.terminate()
            await sse.wait()
    text = "".join(frames)
    assert "event: added" in text
    completed = text[text.index("event: completed") :].splitlines()[1]
    assert json.loads(completed.removeprefix("data: "))["job_id"]


async def test_curl_follows_a_job_output_stream_live_and_resumes(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    curl = _need("curl")
    gate = asyncio.Event()

    async def talk(job: Job[Any, Any]) -> str:
        await job.stream("first")
        await gate.wait()  # the second chunk only once curl showed the first
        await job.stream({"second": 2})
        return "ok"

    async with Worker("talk", talk, connection=valkey_server.url, prefix=prefix, **FAST):
        with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                r = await client.post("/queues/talk/jobs", json={"name": "t"}, headers=JSON)
                path = f"{base}/queues/talk/jobs/{r.json()['job']['id']}/stream"
            sse = await asyncio.create_subprocess_exec(curl, "-sN", path, stdout=subprocess.PIPE)
            assert sse.stdout is not None
            frames: list[str] = []
            try:
                await asyncio.wait_for(_read_until(sse.stdout, '"first"', frames), 30)
                gate.set()
                rest, _ = await asyncio.wait_for(sse.communicate(), 30)  # ends by itself
            finally:
                if sse.returncode is None:
                    sse.terminate()
                    await sse.wait()
            text = "".join(frames) + rest.decode()
            first_id = text[: text.index('data: "first"')].splitlines()[-2].removeprefix("id: ")
            resumed = await asyncio.create_subprocess_exec(
                curl, "-sN", "-H", f"Last-Event-ID: {first_id}", path, stdout=subprocess.PIPE
            )
            again, _ = await asyncio.wait_for(resumed.communicate(), 30)
    assert sse.returncode == 0 and "event: chunk" in text
    assert 'data: {"second":2}' in text and 'event: end\ndata: {"state":"completed"}' in text
    assert '"first"' not in again.decode() and 'data: {"second":2}' in again.decode()
    assert "event: end" in again.decode()


async def test_broadcast_stream_delivers_only_matching_subjects(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            got: list[dict[str, Any]] = []
            path = "/broadcasts/orders/subscriptions/eu-audit/events"
            async with client.stream("GET", path, params={"subject": "orders.eu.*"}) as res:
                assert res.status_code == 200
                lines = res.aiter_lines()
                async for line in lines:
                    if line == "event: ready":
                        break
                for subject, n in [
                    ("orders.us.created", 1),
                    ("orders.eu.created", 2),
                    ("orders.eu.paid", 3),
                ]:
                    r = await client.post(
                        "/broadcasts/orders/messages",
                        json={"name": "order", "data": {"n": n}, "subject": subject},
                        headers=JSON,
                    )
                    assert r.status_code == 201
                kind = ""
                async for line in lines:
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: ") and kind == "message":
                        got.append(json.loads(line.removeprefix("data: ")))
                        if len(got) == 2:
                            break
    assert [m["data"] for m in got] == [{"n": 2}, {"n": 3}]
    async with Broadcast("orders", connection=valkey_server.url, prefix=prefix) as bc:
        assert await bc.get_subjects("eu-audit") == ("orders.eu.*",)


async def test_the_console_script_binds_loopback_and_serves_the_schema(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    with running_proxy(valkey_server.url, "--prefix", prefix, "--queue", "a") as (base, proc):
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/openapi.json")).json()["info"]["title"] == "glidemq proxy"
            r = await client.post("/queues/b/jobs", json={"name": "x"}, headers=JSON)
            assert r.status_code == 403
        listening = [
            c.laddr
            for c in psutil.Process(proc.pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening and all(a.ip == "127.0.0.1" for a in listening)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "not a port"),
        (["--por", "8080"], "unrecognized arguments: --por"),
        (["--basic-auth-file", "/nonexistent/users"], "cannot read"),
        (["--url", "http://x"], "--url"),
        (["--url-file", "/nonexistent/url"], "--url-file"),
        (["--queue", ""], "--queue"),
        (["--max-wait", "0"], "--max-wait"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    valkey_server: ValkeyAddress, args: list[str], message: str
) -> None:
    argv = [*proxy_argv(), *args]
    if "--url" not in args and "--url-file" not in args:
        argv += ["--url", valkey_server.url]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


async def test_a_closed_broadcast_stream_releases_its_worker(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    async def subscribers(q: Queue[Any, Any], n: int) -> bool:
        return len(await q.get_workers()) == n

    with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
        async with (
            Queue("orders@audit", connection=valkey_server.url, prefix=prefix) as sub,
            httpx.AsyncClient(base_url=base, timeout=60) as client,
        ):
            path = "/broadcasts/orders/subscriptions/audit/events"
            async with client.stream("GET", path) as res:
                async for line in res.aiter_lines():
                    if line == "event: ready":
                        break
                # listed once its registration lands (a beat that timed out is retried)
                await wait_for(lambda: subscribers(sub, 1), timeout=30)
            await wait_for(lambda: subscribers(sub, 0), timeout=30)
