"""Callers choose queue names, so the proxy's resources must not grow with them: it keeps at
most `max_queues` queues open, reuses the connection of its admin session for reads, and
`/health` tells Valkey's state even after thousands of names."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from typing import Any

import httpx

from glidemq.server.valkey import parse_info
from tests.conftest import ValkeyAddress

from .conftest import REPO_ROOT, free_port, proxy_argv


def _clients(server: ValkeyAddress) -> int:
    return int(parse_info(server.cli("INFO", "clients"))["connected_clients"])


async def test_three_hundred_queue_names_keep_the_connections_bounded(
    proxy_for: Any, valkey_server: ValkeyAddress
) -> None:
    client = await proxy_for(max_queues=4)
    assert (await client.get("/health")).status_code == 200
    before = _clients(valkey_server)
    for i in range(300):
        r = await client.post(f"/queues/many{i}/jobs", json={"name": "x", "data": {"i": i}})
        assert r.status_code == 201, r.text
        assert (await client.get(f"/queues/many{i}/counts")).status_code == 200
    # 4 open queues (one connection each, no blocking reads here) and what was open before
    assert _clients(valkey_server) <= before + 4 + 2
    assert (await client.get("/health")).status_code == 200
    r = await client.get("/queues/many7/counts")
    assert r.json()["waiting"] == 1


async def test_a_request_waits_for_a_queue_and_then_gets_one(
    proxy_for: Any, valkey_server: ValkeyAddress
) -> None:
    client = await proxy_for(max_queues=1)
    # An add-and-wait holds its queue open while it waits; a second queue must wait too,
    # then run once the first is idle (no worker: the first times out after 0.5 s).
    first = asyncio.ensure_future(
        client.post("/queues/held/jobs/wait", json={"name": "x", "data": {}, "timeout": 0.5})
    )
    await asyncio.sleep(0.1)
    second = await client.post("/queues/other/jobs", json={"name": "x", "data": {}})
    assert (await first).status_code == 504
    assert second.status_code == 201


def test_the_real_proxy_under_a_256_fd_limit_serves_every_queue(
    valkey_server: ValkeyAddress,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")}
    argv = " ".join([*proxy_argv(), "--url", valkey_server.url, "--port", str(port)])
    proc = subprocess.Popen(
        ["sh", "-c", f"ulimit -n 256 && exec {argv} --prefix fdlimit"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=base, timeout=30) as http:
            while True:
                try:
                    http.get("/health")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.communicate()[0]
                    assert time.monotonic() < deadline, "the proxy did not listen within 30 s"
                    time.sleep(0.1)
            for i in range(300):
                r = http.post(f"/queues/fd{i}/jobs", json={"name": "x", "data": {}})
                assert r.status_code == 201, (i, r.status_code, r.text)
            assert http.get("/health").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
