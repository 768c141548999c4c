"""Where the time goes when a job travels alone: valkey-glide's per-call floor next to
glidemq's single add, its worker at concurrency 1 and 10, and the idle wake.

    python benchmarks/alone.py [--url valkey://127.0.0.1:6379] [--calls 5000] [--jobs 5000]
                               [--only ping,fcall,ctx,add,c1,c10,wake] [--reps 3]
                               [--profile DIR]

Without --url it starts the embedded Valkey. Each phase runs strictly one call at a time
and prints, per call (or job), the wall time, this process's CPU (valkey-glide's native
threads included) and the server's CPU, as the median and range over `--reps` runs:

- ping:  `client.custom_command(["PING"])` on a bare valkey-glide client
- fcall: `client.fcall("glidemq_version")` on a bare client (a trivial library function)
- ctx:   the same through glidemq's QueueContext.fcall (error mapping and retry wrapper)
- add:   `Queue.add` one at a time (the `add-single` bench scenario)
- c1, c10: a Worker with a no-op processor draining a pre-filled queue (`process` scenario)
- wake:  one job at a time into an idle worker: from the add's start to the processor's
         start (p50 and p90 over the jobs), with the worker blocked in its read in between

With `--profile DIR`, each phase of the last repetition also runs under cProfile; the stats
are written to DIR/PHASE.pstats and the top lines (own time) are printed.

With `--bullmq REPS`, it then runs glidemq-bench's `process` at concurrency 1 and 10 and
`add-single` (only those) side by side with BullMQ, REPS pairs each, on a fresh embedded
Valkey, and prints the ratio table (`glidemq-bench run --only` cannot pick concurrencies).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from glidemq import Queue, Worker
from glidemq.bench.cpu import process_cpu_seconds, self_cpu_seconds
from glidemq.client.connection import close_client, create_client, resolve_connection
from glidemq.client.context import QueueContext
from glidemq.client.functions import ensure_library
from glidemq.keys import QueueKeys
from glidemq.process.loop import loop_factory

PHASES = ("ping", "fcall", "ctx", "add", "c1", "c10", "wake")


def _main_thread_cpu() -> float:
    """CPU seconds of this process's main thread (the event loop); the rest of the process
    CPU is valkey-glide's native threads."""
    return process_cpu_seconds_of(f"/proc/self/task/{os.getpid()}/stat")


def process_cpu_seconds_of(path: str) -> float:
    with open(path, encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Meter:
    """Wall, own CPU (main thread and total) and server CPU over a window, per operation."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid

    def __enter__(self) -> Meter:
        self.t0, self.c0 = time.perf_counter(), self_cpu_seconds()
        self.m0 = _main_thread_cpu()
        self.s0 = process_cpu_seconds(self.server_pid) if self.server_pid else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = self_cpu_seconds() - self.c0
        self.main = _main_thread_cpu() - self.m0
        self.server = (process_cpu_seconds(self.server_pid) - self.s0) if self.server_pid else 0.0

    def per_op(self, n: int) -> dict[str, float]:
        return {
            "wall_us": self.wall / n * 1e6,
            "cpu_us": self.cpu / n * 1e6,
            "loop_us": self.main / n * 1e6,
            "server_us": self.server / n * 1e6,
            "per_s": n / self.wall,
        }


async def _calls(n: int, call: Callable[[], Awaitable[Any]]) -> None:
    for _ in range(n):
        await call()


async def phase(
    name: str, o: argparse.Namespace, profiler: cProfile.Profile | None
) -> dict[str, float]:
    """Run one phase and return its per-operation figures."""
    url, n = o.url, o.calls
    conn = resolve_connection(url)
    meter = Meter(o.server_pid)
    queue_name = f"alone-{name}"
    if name in ("ping", "fcall", "ctx"):
        client = await create_client(conn)
        try:
            await ensure_library(client)
            ctx = QueueContext(client, QueueKeys(queue_name))
            call: Callable[[], Awaitable[Any]]
            if name == "ping":
                call = lambda: client.custom_command(["PING"])  # noqa: E731
            elif name == "fcall":
                call = lambda: client.fcall("glidemq_version", keys=[], arguments=[])  # noqa: E731
            else:
                call = lambda: ctx.fcall("glidemq_version", [], [])  # noqa: E731
            await _calls(200, call)  # warm up
            with meter:
                if profiler:
                    profiler.enable()
                await _calls(n, call)
                if profiler:
                    profiler.disable()
            return meter.per_op(n)
        finally:
            await close_client(client)
    async with Queue[Any, Any](queue_name, connection=url) as q:
        await q.obliterate(force=True)
        if name == "add":
            with meter:
                if profiler:
                    profiler.enable()
                for i in range(o.jobs):
                    await q.add("noop", {"i": i}, {"remove_on_complete": True})
                if profiler:
                    profiler.disable()
            return meter.per_op(o.jobs)
        if name in ("c1", "c10"):
            return await _process(q, o, int(name[1:]), meter, profiler)
        return await _wake(q, o, meter, profiler)


async def _noop(job: Any) -> None:
    return None


async def _process(
    q: Queue[Any, Any],
    o: argparse.Namespace,
    c: int,
    meter: Meter,
    profiler: cProfile.Profile | None,
) -> dict[str, float]:
    for start in range(0, o.jobs, 1000):
        await q.add_bulk(
            [
                {"name": "noop", "data": {"i": i}, "opts": {"remove_on_complete": True}}
                for i in range(start, min(o.jobs, start + 1000))
            ]
        )
    worker: Worker[Any, None] = Worker(q.name, _noop, connection=o.url, concurrency=c)
    with meter:
        if profiler:
            profiler.enable()
        await worker.start()
        while worker.completed_count < o.jobs:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        if profiler:
            profiler.disable()
    await worker.close()
    return meter.per_op(o.jobs)


async def _wake(
    q: Queue[Any, Any], o: argparse.Namespace, meter: Meter, profiler: cProfile.Profile | None
) -> dict[str, float]:
    started = asyncio.Event()

    async def mark(job: Any) -> None:
        started.set()

    worker: Worker[Any, None] = Worker(q.name, mark, connection=o.url, concurrency=1)
    await worker.start()
    lat: list[float] = []
    n = max(1, o.jobs // 10)
    try:
        with meter:
            if profiler:
                profiler.enable()
            for i in range(n):
                # Long enough for the completion to go out and the worker to block again.
                await asyncio.sleep(0.02)
                started.clear()
                t0 = time.perf_counter()
                await q.add("noop", {"i": i}, {"remove_on_complete": True})
                await started.wait()
                lat.append((time.perf_counter() - t0) * 1e6)
            if profiler:
                profiler.disable()
    finally:
        await worker.close()
    lat.sort()
    out = meter.per_op(n)
    out["p50_us"] = lat[len(lat) // 2]
    out["p90_us"] = lat[int(len(lat) * 0.9)]
    return out


def _summary(rows: list[dict[str, float]]) -> str:
    parts = []
    for key in ("wall_us", "cpu_us", "loop_us", "server_us", "p50_us", "p90_us"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            parts.append(f"{key} {statistics.median(vals):8.1f} ({min(vals):.0f}-{max(vals):.0f})")
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running Valkey (default: start the embedded one)")
    ap.add_argument("--server-pid", type=int, help="with --url: the server's pid, for its CPU")
    ap.add_argument("--calls", type=int, default=5000, help="calls per floor phase")
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per add/process phase")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default=",".join(PHASES), help=f"phases from {','.join(PHASES)}")
    ap.add_argument("--profile", metavar="DIR", help="cProfile each phase's last repetition")
    ap.add_argument("--top", type=int, default=25, help="profile lines printed per phase")
    ap.add_argument("--bullmq", type=int, default=0, metavar="REPS", help="BullMQ pairs too")
    ap.add_argument("--scale", type=float, default=1.0, help="with --bullmq: job count factor")
    o = ap.parse_args(argv)
    names = [p for p in o.only.split(",") if p]
    unknown = set(names) - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}; choose from {','.join(PHASES)}")
    server = None
    if o.url is None:
        from glidemq.server.valkey import EmbeddedValkey

        server = EmbeddedValkey()
        server.start()
        o.url = server.url
        o.server_pid = server.pid
    prof_dir = Path(o.profile) if o.profile else None
    if prof_dir:
        prof_dir.mkdir(parents=True, exist_ok=True)
    factory = loop_factory()
    print(f"{os.cpu_count()} cpus, Python {sys.version.split()[0]}, {o.url}, reps {o.reps}")
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            for name in names:
                rows = []
                for rep in range(o.reps):
                    last = rep == o.reps - 1
                    profiler = cProfile.Profile() if prof_dir and last else None
                    rows.append(runner.run(phase(name, o, profiler)))
                    if profiler and prof_dir:
                        path = prof_dir / f"{name}.pstats"
                        profiler.dump_stats(path)
                print(f"{name:6} {_summary(rows)}", flush=True)
                if prof_dir:
                    stats = pstats.Stats(str(prof_dir / f"{name}.pstats"))
                    stats.sort_stats("tottime").print_stats(o.top)
    finally:
        if server is not None:
            server.stop()
    if o.bullmq:
        _against_bullmq(o.bullmq, o.scale)
    return 0


def _against_bullmq(reps: int, scale: float) -> None:
    from glidemq.bench.harness import format_table, ratios, run_profile, scale_jobs
    from glidemq.bench.peer import ScenarioParams

    profile = [
        ScenarioParams("process", jobs=5_000, concurrency=1),
        ScenarioParams("process", jobs=10_000, concurrency=10),
        ScenarioParams("add-single", jobs=3_000),
    ]
    records = run_profile(scale_jobs(profile, scale), reps, None, progress=print)
    summary = ratios(records)
    print(format_table(summary))
    for key, row in summary.items():
        spread = ", ".join(f"{r:.2f}" for r in row.get("ratios", []))
        print(f"{key}: ratios per pair {spread}")


if __name__ == "__main__":
    raise SystemExit(main())
