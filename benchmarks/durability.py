"""What `durability="replicated"` costs, on the embedded 3+3 cluster (docs/BENCHMARKS.md).

    python benchmarks/durability.py [--jobs 20000] [--reps 3] [--lag-ms 0]

Starts an EmbeddedCluster of 3 primaries with one replica each and runs, for each
repetition, every workload once without and once with the option (alternating, so drift
on a shared machine hits both alike):

- `add-bulk`: `Queue.add_bulk` in chunks of 1,000;
- `add-50`: 50 callers each awaiting its `Queue.add` and adding again;
- `process c=50`: one Worker at concurrency 50 drains a pre-filled queue (results off).

It prints jobs/s (median and range), the ratio with / without, and the WAIT calls the
queue's primary counted per 1,000 jobs (INFO commandstats), which shows that a batch pays
one wait, not one per job. `--lag-ms` puts a delaying proxy on the replication link of the
queue's primary (glidemq.chaos.replication), to see the cost on a slower link.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from glidemq import ConnectionOptions, Queue, Worker
from glidemq.server.cluster import EmbeddedCluster

QUEUE = "bench-durability"


def _wait_calls(cluster: EmbeddedCluster) -> int:
    primary = cluster.primary_for_key(f"glide:{{{QUEUE}}}:meta")
    text = str(primary.execute("INFO", "commandstats"))
    for line in text.splitlines():
        if line.startswith("cmdstat_wait:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


async def _add_bulk(conn: ConnectionOptions, jobs: int) -> float:
    async with Queue(QUEUE, connection=conn) as q:
        await q.obliterate(force=True)
        t0 = time.perf_counter()
        for start in range(0, jobs, 1000):
            await q.add_bulk([("noop", {"i": i}) for i in range(start, min(jobs, start + 1000))])
        wall = time.perf_counter() - t0
        await q.obliterate(force=True)
    return jobs / wall


async def _add_50(conn: ConnectionOptions, jobs: int) -> float:
    async with Queue(QUEUE, connection=conn) as q:
        await q.obliterate(force=True)
        counter = iter(range(jobs))

        async def lane() -> None:
            for i in counter:
                await q.add("noop", {"i": i})

        t0 = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(50)))
        wall = time.perf_counter() - t0
        await q.obliterate(force=True)
    return jobs / wall


async def _noop(job: Any) -> None:
    return None


async def _process(conn: ConnectionOptions, jobs: int) -> float:
    plain = ConnectionOptions(addresses=conn.addresses, cluster=True)
    async with Queue(QUEUE, connection=plain) as q:
        await q.obliterate(force=True)
        for start in range(0, jobs, 1000):
            batch = range(start, min(jobs, start + 1000))
            await q.add_bulk([("noop", {"i": i}, {"remove_on_complete": True}) for i in batch])
        done = asyncio.Event()
        seen = 0

        def on_completed(job: Any, rv: Any) -> None:
            nonlocal seen
            seen += 1
            if seen >= jobs:
                done.set()

        worker: Worker[Any, Any] = Worker(QUEUE, _noop, connection=conn, concurrency=50)
        worker.on("completed", on_completed)
        t0 = time.perf_counter()
        await worker.start()
        await asyncio.wait_for(done.wait(), 600)
        wall = time.perf_counter() - t0
        await worker.close()
        await q.obliterate(force=True)
    return jobs / wall


WORKLOADS: dict[str, Callable[[ConnectionOptions, int], Awaitable[float]]] = {
    "add-bulk": _add_bulk,
    "add-50": _add_50,
    "process c=50": _process,
}


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):>8,.0f} ({min(values):,.0f}-{max(values):,.0f})"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--lag-ms", type=float, default=0.0)
    o = p.parse_args()
    cluster = EmbeddedCluster().start()
    lag = None
    try:
        base = ConnectionOptions(addresses=tuple(cluster.addresses), cluster=True)
        durable = base.with_durability("replicated")
        if o.lag_ms > 0:
            from glidemq.chaos.replication import ReplicationLag

            primary = cluster.primary_for_key(f"glide:{{{QUEUE}}}:meta")
            lag = ReplicationLag(cluster, primary, o.lag_ms).start()
        rates: dict[tuple[str, bool], list[float]] = {}
        waits: dict[str, list[float]] = {}
        for _ in range(o.reps):
            for name, run in WORKLOADS.items():
                for on in (False, True):
                    before = _wait_calls(cluster)
                    rate = await run(durable if on else base, o.jobs)
                    rates.setdefault((name, on), []).append(rate)
                    if on:
                        per = (_wait_calls(cluster) - before) * 1000 / o.jobs
                        waits.setdefault(name, []).append(per)
                    print(f"{name:<14} {'replicated' if on else 'off':<10} {rate:>10,.0f} jobs/s")
        print()
        print(f"{o.jobs:,} jobs per run, {o.reps} reps, replication lag {o.lag_ms:g} ms")
        print(f"machine: {os.cpu_count()} cpus, {platform.platform(terse=True)}")
        print(
            f"{'workload':<14} {'off jobs/s':>22} {'replicated jobs/s':>22} {'ratio':>6}"
            f" {'WAITs/1000 jobs':>16}"
        )
        for name in WORKLOADS:
            off, on = rates[(name, False)], rates[(name, True)]
            ratio = statistics.median(on) / statistics.median(off)
            print(
                f"{name:<14} {_fmt(off):>22} {_fmt(on):>22} {ratio:>5.2f}x"
                f" {statistics.median(waits[name]):>16.1f}"
            )
    finally:
        if lag is not None:
            lag.stop()
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
