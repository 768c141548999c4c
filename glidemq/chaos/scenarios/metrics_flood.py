"""metrics-flood: idle, slow and garbage clients on the supervisor's metrics port while
worker processes are killed; `/health` must keep answering fast.

`glidemq-run` serves `/metrics` and `/health` from its supervisor (`--metrics-port`). For
`--flood-s` seconds the run holds `--idle` connections that never send a byte, `--slow`
connections that send a request one byte every 0.2 s, and a stream of connections that
send garbage, while it SIGKILLs a random worker process every `--kill-every` seconds. A
probe asks `GET /health` on a fresh connection every 50 ms; the result reports the
latency percentiles, and the run fails when p99 is above `--max-health-p99-ms` (100) or a
probe got no answer within 2 s. A supervisor that serves one connection at a time on its
loop stalls behind the first idle client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import socket
import time

from ..context import ChaosRun
from ..faults import kill_process, process_tree
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["MetricsFlood", "percentile"]

_PROBE_EVERY = 0.05
_PROBE_TIMEOUT = 2.0


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) of `values`, nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@register
class MetricsFlood(Scenario):
    name = "metrics-flood"
    summary = "idle, slow and garbage clients on the metrics port while workers are killed"
    defaults = FleetSettings(procs=2, concurrency=4, job_ms=20.0, faults=0, rate=100.0)

    def __init__(self) -> None:
        self.port = 0

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--flood-s", type=float, default=20.0, metavar="SECONDS")
        parser.add_argument("--idle", type=int, default=50, help="idle connections (50)")
        parser.add_argument("--slow", type=int, default=20, help="slow-request connections (20)")
        parser.add_argument(
            "--kill-every", type=float, default=1.0, metavar="SECONDS", help="worker kills"
        )
        parser.add_argument(
            "--max-health-p99-ms",
            type=float,
            default=100.0,
            metavar="MS",
            help="fail above this /health latency p99 (default 100)",
        )

    def fleet_args(self, run: ChaosRun) -> list[str]:
        self.port = _free_port()
        return ["--metrics-port", str(self.port)]

    async def inject(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        await run.wait_workers(run.settings.procs)
        length = float(run.args.flood_s)
        stop = time.monotonic() + length
        held: list[asyncio.StreamWriter] = []
        counts = {"idle": 0, "slow": 0, "garbage": 0, "refused": 0}
        latencies: list[float] = []
        failures: list[str] = []
        tasks = [
            asyncio.create_task(self._idle(run.args.idle, held, counts)),
            *(asyncio.create_task(self._slow(stop, counts)) for _ in range(run.args.slow)),
            asyncio.create_task(self._garbage(stop, counts)),
            asyncio.create_task(self._kill(run, stop)),
        ]
        try:
            while time.monotonic() < stop:
                began = time.monotonic()
                try:
                    await asyncio.wait_for(self._health(), _PROBE_TIMEOUT)
                    latencies.append((time.monotonic() - began) * 1000)
                except (TimeoutError, OSError, ValueError) as exc:
                    latencies.append(_PROBE_TIMEOUT * 1000)
                    failures.append(f"{type(exc).__name__}: {exc}"[:120])
                await asyncio.sleep(max(0.0, began + _PROBE_EVERY - time.monotonic()))
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for w in held:
                w.close()
        p99 = percentile(latencies, 99)
        bound = float(run.args.max_health_p99_ms)
        run.extra["metrics_flood"] = {
            "probes": len(latencies),
            "unanswered": len(failures),
            "first_failures": failures[:5],
            "health_ms": {
                "p50": _r(percentile(latencies, 50)),
                "p99": _r(p99),
                "max": _r(max(latencies) if latencies else None),
            },
            "max_p99_ms": bound,
            "clients": counts,
            "kills": len(run.faults),
        }
        run.say(f"/health p99 {p99 if p99 is not None else float('nan'):.1f} ms under the flood")
        if p99 is None or p99 > bound or failures:
            run.problem(
                f"metrics-flood: /health p99 {_r(p99)} ms (bound {bound:g} ms), "
                f"{len(failures)} of {len(latencies)} probes unanswered within {_PROBE_TIMEOUT:g} s"
            )

    async def _health(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await writer.drain()
            head = await reader.readline()
            if not head.startswith(b"HTTP/1."):
                raise ValueError(f"not an HTTP answer: {head[:40]!r}")
            await reader.read()
        finally:
            writer.close()

    async def _idle(self, n: int, held: list[asyncio.StreamWriter], counts: dict[str, int]) -> None:
        for _ in range(n):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                counts["refused"] += 1
                continue
            held.append(writer)
            counts["idle"] += 1
        await asyncio.Event().wait()

    async def _slow(self, stop: float, counts: dict[str, int]) -> None:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        while time.monotonic() < stop:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                counts["refused"] += 1
                await asyncio.sleep(0.2)
                continue
            counts["slow"] += 1
            with contextlib.suppress(OSError):
                for i in range(len(request)):
                    if time.monotonic() >= stop:
                        break
                    writer.write(request[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(0.2)
            writer.close()

    async def _garbage(self, stop: float, counts: dict[str, int]) -> None:
        junk = bytes(range(256)) * 64
        while time.monotonic() < stop:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                counts["refused"] += 1
                await asyncio.sleep(0.05)
                continue
            counts["garbage"] += 1
            with contextlib.suppress(OSError):
                writer.write(junk)
                await writer.drain()
            writer.close()
            await asyncio.sleep(0.01)

    async def _kill(self, run: ChaosRun, stop: float) -> None:
        assert run.fleet is not None
        while time.monotonic() < stop:
            await asyncio.sleep(float(run.args.kill_every))
            workers = run.fleet.ready_workers()
            if workers:
                victim = run.rng.choice(workers)
                hurt = process_tree(victim)
                if kill_process(victim, signal.SIGKILL):
                    run.fault("sigkill-worker", victim.pid, pids=hurt, workers=len(workers))


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
