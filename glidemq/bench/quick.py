"""Quick throughput check: pre-filled no-op jobs through one Worker on an embedded Valkey.

    python -m glidemq.bench.quick [--jobs 20000] [--concurrency 100]

Prints jobs/s and the CPU spent per job by the server and by this process. Numbers on a
shared machine drift; the side-by-side harness compares systems inside one run.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..client.connection import ConnectionOptions
from ..job.job import Job
from ..process.loop import loop_factory
from ..queue.queue import Queue
from ..server.valkey import EmbeddedValkey
from ..worker.worker import Worker
from .cpu import process_cpu_seconds, self_cpu_seconds

__all__ = ["QuickResult", "main", "run_quick"]


@dataclass(frozen=True)
class QuickResult:
    """One measured run."""

    jobs: int
    concurrency: int
    seconds: float
    add_seconds: float
    server_cpu: float
    client_cpu: float

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def adds_per_second(self) -> float:
        return self.jobs / self.add_seconds


def _progress(done: int, total: int, started: float) -> None:
    if not sys.stderr.isatty():
        return
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {rate:,.0f}/s")
    sys.stderr.flush()


async def run_quick(
    conn: ConnectionOptions, server_pid: int | None, jobs: int, concurrency: int, queue: str
) -> QuickResult:
    """Pre-fill `jobs` no-op jobs, then time one Worker from start to the last completion."""
    q: Queue[dict[str, int], None]
    async with Queue(queue, connection=conn) as q:
        await q.obliterate(force=True)
        t0 = time.perf_counter()
        batch = [
            {"name": "noop", "data": {"i": i}, "opts": {"remove_on_complete": True}}
            for i in range(jobs)
        ]
        await q.add_bulk(batch)
        add_seconds = time.perf_counter() - t0

        async def noop(job: Job[dict[str, int], None]) -> None:
            return None

        worker: Worker[dict[str, int], None] = Worker(
            queue, noop, connection=conn, concurrency=concurrency, events=True
        )
        s0 = process_cpu_seconds(server_pid) if server_pid else 0.0
        c0 = self_cpu_seconds()
        started = time.perf_counter()
        await worker.start()
        while worker.completed_count < jobs:
            await asyncio.sleep(0.01)
            _progress(worker.completed_count, jobs, started)
        seconds = time.perf_counter() - started
        s1 = process_cpu_seconds(server_pid) if server_pid else 0.0
        c1 = self_cpu_seconds()
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        await worker.close()
        await q.obliterate(force=True)
    return QuickResult(jobs, concurrency, seconds, add_seconds, s1 - s0, c1 - c0)


def _report(r: QuickResult) -> str:
    us = 1e6 / r.jobs
    return (
        f"  processed {r.jobs:,} jobs in {r.seconds:.2f} s: {r.jobs_per_second:,.0f} jobs/s "
        f"(concurrency {r.concurrency})\n"
        f"  server CPU {100 * r.server_cpu / r.seconds:.0f}% of a core, "
        f"{r.server_cpu * us:.1f} us/job; client CPU {100 * r.client_cpu / r.seconds:.0f}%, "
        f"{r.client_cpu * us:.1f} us/job\n"
        f"  add_bulk: {r.adds_per_second:,.0f} jobs/s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m glidemq.bench.quick",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20000)")
    parser.add_argument("--concurrency", type=int, default=100, help="worker concurrency")
    parser.add_argument("--repeat", type=int, default=1, help="runs (default 1)")
    parser.add_argument("--url", help="use this Valkey instead of starting an embedded one")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.concurrency < 1 or args.repeat < 1:
        parser.error("--jobs, --concurrency and --repeat must be positive")

    print(
        f"glidemq quick benchmark on {platform.node()} ({platform.machine()}, "
        f"Python {platform.python_version()})"
    )
    server: EmbeddedValkey | None = None
    try:
        if args.url:
            conn = ConnectionOptions.from_url(args.url)
            pid = None
        else:
            server = EmbeddedValkey().start()
            print(f"  embedded Valkey on {server.url} (pid {server.pid})")
            conn = ConnectionOptions.from_url(server.url)
            pid = server.pid
        for i in range(args.repeat):
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                result = runner.run(
                    run_quick(conn, pid, args.jobs, args.concurrency, "bench-quick")
                )
            print(f"run {i + 1}/{args.repeat}:")
            print(_report(result))
    finally:
        if server is not None:
            server.stop()
            print("  embedded Valkey stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
