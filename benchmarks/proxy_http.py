"""Throughput and latency through the HTTP proxy: a real `glidemq-proxy` process (uvicorn)
in front of a local Valkey, driven by httpx over loopback.

    python benchmarks/proxy_http.py [--adds 5000] [--clients 50] [--waits 300] [--url URL]

Without --url it starts the embedded Valkey. Prints adds/s with `--clients` concurrent HTTP
clients (POST /queues/q/jobs, one keep-alive connection each), and the latency of add-and-wait
(POST /queues/q/jobs/wait, one caller at a time, a no-op Python Worker in this process)
as p50 / p99 / max in milliseconds. Also the CPU time the proxy process and this client
spent per add: on a busy machine the rate is what was left over, the CPU cost is not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

from glidemq import Job, Worker

HERE = Path(__file__).resolve().parent
JSON = {"content-type": "application/json"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_proxy(url: str, prefix: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    script = Path(sys.executable).with_name("glidemq-proxy")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "glidemq.proxy.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")}
    proc = subprocess.Popen([*argv, "--url", url, "--prefix", prefix, "--port", str(port)], env=env)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("glidemq-proxy did not start") from None
            time.sleep(0.1)


async def _throughput(base: str, adds: int, clients: int) -> float:
    # One AsyncClient (one keep-alive connection) per caller: httpx's shared pool costs
    # the client several times more CPU per request at 50 connections.
    https = [httpx.AsyncClient(base_url=base, timeout=60) for _ in range(clients)]
    try:
        for http in https:
            (
                await http.post("/queues/bench/jobs", json={"name": "warm"}, headers=JSON)
            ).raise_for_status()
        left = adds

        async def caller(http: httpx.AsyncClient) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                r = await http.post(
                    "/queues/bench/jobs", json={"name": "noop", "data": {"n": left}}, headers=JSON
                )
                r.raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(caller(http) for http in https))
        return adds / (time.perf_counter() - start)
    finally:
        for http in https:
            await http.aclose()


async def _latency(base: str, url: str, prefix: str, waits: int) -> list[float]:
    async def noop(job: Job[Any, Any]) -> Any:
        return job.data

    out: list[float] = []
    async with (
        Worker("rpc", noop, connection=url, prefix=prefix, concurrency=10),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        for i in range(waits + 20):
            t = time.perf_counter()
            r = await http.post(
                "/queues/rpc/jobs/wait", json={"name": "echo", "data": i}, headers=JSON
            )
            took = time.perf_counter() - t
            r.raise_for_status()
            if i >= 20:  # warm-up excluded
                out.append(took * 1000)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (default: start the embedded Valkey)")
    p.add_argument("--adds", type=int, default=5000)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--waits", type=int, default=300)
    args = p.parse_args()
    server = None
    url = args.url
    if url is None:
        from glidemq.server.valkey import EmbeddedValkey

        server = EmbeddedValkey().start()
        url = server.url
    prefix = f"pxbench{uuid.uuid4().hex[:6]}"
    proxy, base = _start_proxy(url, prefix)
    try:
        server_cpu, client_cpu = psutil.Process(proxy.pid), psutil.Process()
        before = sum(server_cpu.cpu_times()[:2]), sum(client_cpu.cpu_times()[:2])
        rate = asyncio.run(_throughput(base, args.adds, args.clients))
        after = sum(server_cpu.cpu_times()[:2]), sum(client_cpu.cpu_times()[:2])
        lat = sorted(asyncio.run(_latency(base, url, prefix, args.waits)))
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        if server is not None:
            server.stop()
    q = statistics.quantiles(lat, n=100)
    print(
        json.dumps(
            {
                "adds_per_s": round(rate),
                "clients": args.clients,
                "proxy_cpu_ms_per_add": round((after[0] - before[0]) * 1000 / args.adds, 3),
                "client_cpu_ms_per_add": round((after[1] - before[1]) * 1000 / args.adds, 3),
                "load_average_1m": round(os.getloadavg()[0], 1),
                "add_and_wait_ms": {
                    "p50": round(q[49], 2),
                    "p99": round(q[98], 2),
                    "max": round(lat[-1], 2),
                },
                "waits": len(lat),
            }
        )
    )


if __name__ == "__main__":
    main()
