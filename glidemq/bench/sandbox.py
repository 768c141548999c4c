"""Measure the sandbox against in-process processors on one server, in one run.

    python -m glidemq.bench.sandbox [--jobs 20000] [--concurrency 8] [--rounds 3] [--url URL]

Prints: start-up cost (fork server, one child, a recycled child per start method), the IPC
round trip of one run (sequential and 8 in flight), and no-op jobs/s through a Worker,
sandboxed and in-process, alternating so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from ..client.connection import ConnectionOptions
from ..client.context import QueueContext
from ..job.job import Job
from ..keys import QueueKeys
from ..process.loop import loop_factory
from ..queue.queue import Queue
from ..sandbox.pool import SandboxPool
from ..sandbox.types import SandboxOptions
from ..worker.worker import Worker

__all__ = ["main"]

NOOP = "glidemq.bench.sandbox:noop"


async def noop(job: Job[Any, Any]) -> None:
    """The no-op processor every scenario runs."""
    return None


def _fake_jobs(n: int) -> list[Job[Any, Any]]:
    ctx = QueueContext(None, QueueKeys("bench"))  # type: ignore[arg-type]  # never used
    return [Job.created(ctx, str(i), "j", i, {}, 0, 0, 0, 1) for i in range(n)]


async def _ready(pool: SandboxPool, count: int) -> None:
    while pool.stats()["ready"] < count:  # noqa: ASYNC110 - a bench polls, cheaply
        await asyncio.sleep(0.001)


async def startup(method: Any) -> dict[str, float]:
    """Seconds to the first ready child, to all 8, and per recycled child."""
    pool = SandboxPool(NOOP, SandboxOptions(start_method=method), slots=8)
    t0 = time.perf_counter()
    await pool.start()
    await _ready(pool, 1)
    first = time.perf_counter() - t0
    await _ready(pool, 8)
    all8 = time.perf_counter() - t0
    await pool.close()
    # max_jobs_per_child=1: every run needs a fresh child, so a run's time is a child start
    recycle = SandboxPool(NOOP, SandboxOptions(start_method=method, max_jobs_per_child=1), slots=1)
    await recycle.start()
    jobs = _fake_jobs(30 if method == "forkserver" else 5)
    await _ready(recycle, 1)
    t0 = time.perf_counter()
    for job in jobs:
        await recycle.run(job)
    per_child = (time.perf_counter() - t0) / len(jobs)
    await recycle.close()
    return {"first_child_s": first, "eight_children_s": all8, "per_recycled_child_s": per_child}


async def round_trip(n: int) -> dict[str, float]:
    """Microseconds per run through the pool, one at a time and 8 in flight."""
    pool = SandboxPool(NOOP, SandboxOptions(), slots=8)
    await pool.start()
    await _ready(pool, 8)
    jobs = _fake_jobs(n)
    samples = []
    for job in jobs:
        t0 = time.perf_counter()
        await pool.run(job)
        samples.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    queue: asyncio.Queue[Job[Any, Any]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)

    async def lane() -> None:
        while not queue.empty():
            await pool.run(queue.get_nowait())

    await asyncio.gather(*(lane() for _ in range(8)))
    parallel = time.perf_counter() - t0
    await pool.close()
    samples.sort()
    return {
        "sequential_p50_us": samples[len(samples) // 2] * 1e6,
        "sequential_p99_us": samples[int(len(samples) * 0.99)] * 1e6,
        "in_flight_8_us_per_run": parallel / n * 1e6,
        "in_flight_8_runs_per_s": n / parallel,
    }


async def throughput(
    url: str, n: int, concurrency: int, sandbox: SandboxOptions | None, name: str
) -> float:
    """No-op jobs/s through a Worker, from the first fetch to the last completion."""
    conn = ConnectionOptions.from_url(url)
    queue: Queue[Any, Any] = Queue(name, connection=conn)
    await queue.add_bulk([("j", i) for i in range(n)])
    options: dict[str, Any] = {
        "connection": conn,
        "concurrency": concurrency,
        "remove_on_complete": True,
        "events": False,
    }
    worker: Worker[Any, Any]
    if sandbox is not None:
        # Children warm before the clock starts: the start-up cost is measured on its own.
        worker = Worker(name, NOOP, sandbox=sandbox, **options)
        worker.pause()
        await worker.start()
        assert worker.sandbox_pool is not None
        await _ready(worker.sandbox_pool, worker.sandbox_pool.size)
        t0 = time.perf_counter()
        worker.resume()
    else:
        worker = Worker(name, noop, **options)
        t0 = time.perf_counter()
        await worker.start()
    # Polled, not an event handler: a listener would add its own cost to every job.
    while worker.completed_count < n:  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - t0
    await worker.close()
    await queue.obliterate(force=True)
    await queue.close()
    return n / elapsed


SCENARIOS: dict[str, SandboxOptions | None] = {
    "in-process": None,
    "sandbox, one job per child (default, pipeline 16)": SandboxOptions(),
    "sandbox, one job per child, pipeline 3": SandboxOptions(pipeline=3),
    "sandbox, one job per child, no pipelining": SandboxOptions(pipeline=0),
    "sandbox, async, 2 children": SandboxOptions(max_children=2),
    "sandbox, async, 1 child": SandboxOptions(max_children=1),
}


async def run(args: argparse.Namespace) -> None:
    """All the measurements, printed as they finish."""
    server = None
    url = args.url
    if url is None:
        from ..server.valkey import EmbeddedValkey

        server = EmbeddedValkey().start()
        url = server.url
    try:
        for method in ("forkserver", "spawn"):
            cost = await startup(method)
            print(f"start-up {method}: " + ", ".join(f"{k} {v:.4f}" for k, v in cost.items()))
        rt = await round_trip(args.round_trip)
        print("round trip: " + ", ".join(f"{k} {v:.1f}" for k, v in rt.items()))
        results: dict[str, list[float]] = {name: [] for name in SCENARIOS}
        for r in range(args.rounds):
            line = []
            for i, (label, sandbox) in enumerate(SCENARIOS.items()):
                rate = await throughput(url, args.jobs, args.concurrency, sandbox, f"b{r}-{i}")
                results[label].append(rate)
                line.append(f"{label} {rate:,.0f}")
            print(f"round {r + 1}: " + "; ".join(line))
        base = statistics.median(results["in-process"])
        print(f"median of {args.rounds} rounds, concurrency {args.concurrency}, no-op jobs:")
        for label, rates in results.items():
            rate = statistics.median(rates)
            added = (1 / rate - 1 / base) * 1e6
            print(f"  {label}: {rate:,.0f} jobs/s ({rate / base:.2f}x, {added:+.0f} us/job)")
    finally:
        if server is not None:
            server.stop()


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse flags and run the measurements on uvloop."""
    p = argparse.ArgumentParser(prog="python -m glidemq.bench.sandbox")
    p.add_argument("--url", help="Valkey URL (default: an embedded server)")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--round-trip", type=int, default=5_000, help="runs for the round trip")
    args = p.parse_args(argv)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(run(args))


if __name__ == "__main__":
    main()
