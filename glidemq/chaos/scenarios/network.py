"""network: put a TCP fault proxy between the fleet (and the producer) and Valkey, and make
the network misbehave while jobs flow.

The faults, one per fault point, in this order (repeating when `--faults` is larger):

- `latency`: every chunk delayed `--latency-ms` (plus up to half that as jitter) for
  `--fault-s` seconds;
- `stall`: nothing passes for `--fault-s` seconds (a partition that heals; TCP keeps the
  bytes, so the connections carry on afterwards);
- `reset`: every open connection is reset (RST); valkey-glide reconnects at once;
- `blackhole`: for `--fault-s` seconds new connections are swallowed and open ones go
  silent for good. valkey-glide never notices a silent connection by itself: each worker's
  watchdog replaces its clients once the server answers again, within `block_timeout +
  request_timeout + 1 s` of its last successful fetch.

The monitoring and the final collection connect to the server directly. The workers use a
1 s request time-out (`?timeout_ms=1000` in their URL), so a silent connection is noticed
quickly.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

from ..context import ChaosRun
from ..proxy import FaultProxy
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["Network"]

KINDS = ("latency", "stall", "reset", "blackhole")
_WORKER_TIMEOUT_MS = 1000


@register
class Network(Scenario):
    name = "network"
    summary = "latency, stalls, resets and a black hole between workers and Valkey (TCP proxy)"
    defaults = FleetSettings(procs=2, concurrency=8, job_ms=20.0, faults=4, rate=200.0)

    def __init__(self) -> None:
        self.proxy: FaultProxy | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--fault-s",
            type=float,
            default=1.5,
            metavar="SECONDS",
            help="how long latency, a stall and a black hole last (default 1.5)",
        )
        parser.add_argument(
            "--latency-ms",
            type=float,
            default=50.0,
            metavar="MS",
            help="added delay per direction during the latency fault (default 50)",
        )

    def unavailable(self, args: argparse.Namespace) -> str | None:
        url = getattr(args, "url", None)
        if url and ("," in urlsplit(url).netloc or "cluster=" in url):
            return "network proxies one standalone server; a cluster URL cannot go through it"
        return super().unavailable(args)

    async def prepare(self, run: ChaosRun) -> None:
        parts = urlsplit(run.target.url)
        upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.proxy = await FaultProxy(upstream).__aenter__()
        auth = f"{parts.username or ''}:{parts.password}@" if parts.password else ""
        db = parts.path if parts.path.strip("/") else ""
        port = self.proxy.port
        run.worker_url = (
            f"{parts.scheme}://{auth}{self.proxy.host}:{port}{db}?timeout_ms={_WORKER_TIMEOUT_MS}"
        )
        run.say(f"workers and producer go through the fault proxy on port {port}")

    async def inject(self, run: ChaosRun) -> None:
        proxy = self.proxy
        assert proxy is not None
        hold = float(run.args.fault_s)
        latency = float(run.args.latency_ms)
        report: list[dict[str, Any]] = []
        for n, point in enumerate(run.fault_points(run.settings.faults, 0.1, 0.7)):
            await run.wait_progress(point)
            kind = KINDS[n % len(KINDS)]
            began = time.monotonic()
            if kind == "latency":
                await asyncio.to_thread(proxy.set_latency, latency, latency / 2)
                fault = run.fault(kind, None, latency_ms=latency, hold_s=hold)
            elif kind == "stall":
                await asyncio.to_thread(proxy.stall)
                fault = run.fault(kind, None, hold_s=hold)
            elif kind == "reset":
                fault = run.fault(kind, None, connections=await asyncio.to_thread(proxy.reset))
            else:
                await asyncio.to_thread(proxy.blackhole)
                fault = run.fault(kind, None, hold_s=hold)
            if kind != "reset":
                await asyncio.sleep(hold)
                await asyncio.to_thread(proxy.heal)
            fault.ended = time.time()
            done = run.progress.done
            # progress after the fault was lifted: the fleet is taking jobs again
            resumed = await _progress_after(run, done, 60.0)
            fault.detail["resumed_after_lift_s"] = resumed
            report.append({"kind": kind, "lifted_after_s": round(time.monotonic() - began, 3)})
            if resumed is None and run.progress.done < run.jobs:
                run.problem(f"no job finished within 60 s after the {kind} fault was lifted")
        run.extra["proxy"] = await asyncio.to_thread(proxy.status)

    async def cleanup(self, run: ChaosRun) -> None:
        if self.proxy is not None:
            await self.proxy.__aexit__(None, None, None)
            self.proxy = None


async def _progress_after(run: ChaosRun, done: int, timeout: float) -> float | None:
    """Seconds until more than `done` jobs are finished (None after `timeout`, 0.0 when the
    run has nothing left to do)."""
    began = time.monotonic()
    while run.progress.done <= done:
        if run.progress.done >= run.jobs:
            return 0.0
        if time.monotonic() - began > timeout:
            return None
        await asyncio.sleep(0.02)
    return round(time.monotonic() - began, 3)
