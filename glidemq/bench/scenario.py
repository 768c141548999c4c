"""glidemq side of a benchmark scenario, run in a process of its own so CPU is its own.

    python -m glidemq.bench.scenario SCENARIO --port P [--jobs N] [--concurrency C] ...

Prints one JSON object, the same shape as the BullMQ peer's (peers/bullmq/peer.mjs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from ..job.job import Job
from ..process.loop import loop_factory
from ..queue.queue import Queue
from ..worker.worker import Worker
from . import workloads
from .cpu import process_cpu_seconds, self_cpu_seconds

__all__ = ["SCENARIOS", "main", "run_scenario"]

SCENARIOS = (
    *("add-single", "add-concurrent", "add-bulk", "process", "procs", "latency"),
    *("sandbox", "batch", "cluster", "memory", "cpu", "add-sync", "fair"),
)


class _Window:
    """CPU of this process and of the server over a measured window."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.t0 = time.perf_counter()
        self.c0 = self_cpu_seconds()
        self.s0 = process_cpu_seconds(server_pid) if server_pid else 0.0

    def close(self) -> dict[str, float]:
        return {
            "seconds": time.perf_counter() - self.t0,
            "client_cpu": self_cpu_seconds() - self.c0,
            "server_cpu": (process_cpu_seconds(self.server_pid) - self.s0)
            if self.server_pid
            else 0.0,
        }


async def _prefill(q: Queue[Any, Any], n: int, chunk: int = 1000) -> None:
    for start in range(0, n, chunk):
        await q.add_bulk(
            [
                {"name": "noop", "data": {"i": i}, "opts": {"remove_on_complete": True}}
                for i in range(start, min(n, start + chunk))
            ]
        )


async def _noop(job: Job[Any, None]) -> None:
    return None


noop_job = _noop  # the processor glidemq-run loads in the `procs` scenario


def _busy(us: int) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


async def run_scenario(o: argparse.Namespace) -> dict[str, Any]:
    """Run one scenario and return its measurements."""
    url = o.url or f"valkey://{o.host}:{o.port}"
    o.server_pids = [int(p) for p in str(o.server_pid or "").split(",") if p]
    o.server_pid = o.server_pids[0] if o.server_pids else None
    queue: Queue[Any, Any] = Queue(o.queue, connection=url)
    async with queue as q:
        await q.obliterate(force=True)
        result: dict[str, Any]
        if o.scenario.startswith("add-"):
            w = _Window(o.server_pid)
            if o.scenario == "add-single":
                for i in range(o.jobs):
                    await q.add("noop", {"i": i}, {"remove_on_complete": True})
            elif o.scenario == "add-concurrent":
                counter = iter(range(o.jobs))

                async def lane() -> None:
                    for i in counter:
                        await q.add("noop", {"i": i})

                await asyncio.gather(*(lane() for _ in range(o.inflight)))
            else:
                await _prefill(q, o.jobs, o.chunk)
            result = {"jobs": o.jobs, **w.close()}
        elif o.scenario == "process":
            await _prefill(q, o.jobs, o.chunk)
            processor = _noop
            if o.plant_delay_us:
                # Test hook for the regression gate: a deliberate per-job slowdown.
                async def planted(job: Job[Any, None]) -> None:
                    _busy(o.plant_delay_us)

                processor = planted
            raw = workloads.RawRecorder(o.raw_out)
            w = _Window(o.server_pid)
            worker: Worker[Any, None] = Worker(
                o.queue, processor, connection=url, concurrency=o.concurrency
            )
            raw.attach(worker)
            await worker.start()
            # Polling a counter costs nothing per job; a per-job event handler would.
            while worker.completed_count < o.jobs:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            result = {"jobs": o.jobs, **w.close()}
            await worker.close()
            raw.write()
        elif o.scenario == "sandbox":
            result = await workloads.run_sandbox(o, q, url)
        elif o.scenario == "batch":
            result = await workloads.run_batch(o, q, url)
        elif o.scenario == "fair":
            result = await workloads.run_fair(o, q, url)
        elif o.scenario == "cluster":
            result = await workloads.run_cluster(o, url)
        elif o.scenario == "memory":
            result = await workloads.run_memory(o, q, url)
        elif o.scenario == "cpu":
            result = await workloads.run_cpu(o, q, url)
        elif o.scenario == "procs":
            # glidemq-run with N worker processes; client CPU is theirs, not measured here.
            await _prefill(q, o.jobs, o.chunk)
            run = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "glidemq.runtime.cli", "glidemq.bench.scenario:noop_job",
                "--queue", o.queue, "--url", url, "--procs", str(o.procs),
                "--concurrency", str(o.concurrency), "--log-level", "WARNING",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            # Timed from the first completion seen: process start-up is not counted (the
            # BullMQ side uses the same rule).
            window: _Window | None = None
            left0 = 0
            while True:
                c = await q.get_job_counts()
                left = c.waiting + c.active + c.prioritized
                if window is None and left < o.jobs:
                    window, left0 = _Window(o.server_pid), left
                if left == 0:
                    break
                await asyncio.sleep(0.005)
            assert window is not None
            result = {"jobs": left0, **window.close(), "client_cpu": 0.0, "procs": o.procs}
            run.send_signal(signal.SIGTERM)
            await run.wait()
        elif o.scenario == "latency":
            total = round(o.rate * o.seconds)
            latencies: list[float] = []
            done = asyncio.Event()

            def completed(job: Job[Any, None], _: Any) -> None:
                latencies.append(time.time() * 1000 - job.data["t"])
                if len(latencies) == total:
                    done.set()

            worker = Worker(o.queue, _noop, connection=url, concurrency=10)
            worker.on("completed", completed)
            await worker.start()
            await asyncio.sleep(0.2)
            w = _Window(o.server_pid)
            t0 = time.perf_counter()
            adds: list[asyncio.Future[Any]] = []
            for i in range(total):
                # Open loop: each add is due at a fixed time, finished or not.
                wait = t0 + i / o.rate - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                adds.append(
                    asyncio.ensure_future(
                        q.add("noop", {"t": time.time() * 1000}, {"remove_on_complete": True})
                    )
                )
            await asyncio.gather(*adds)
            await asyncio.wait_for(done.wait(), 60)
            result = {"jobs": total, "latencies_ms": latencies, **w.close()}
            await worker.close()
        else:
            raise SystemExit(f"unknown scenario {o.scenario!r}; one of {SCENARIOS}")
        await q.obliterate(force=True)
    from ..version import __version__

    result.update(system="glidemq", scenario=o.scenario, pid=os.getpid(), version=__version__)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glidemq.bench.scenario")
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--queue", default="bench-glidemq")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--inflight", type=int, default=50)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=10, help="jobs per batch (batch)")
    p.add_argument("--queues", type=int, default=6, help="queues (cluster); groups (fair)")
    p.add_argument("--url", help="server URL; overrides --host/--port (a cluster: host:p1,p2)")
    p.add_argument("--server-pid", help="server process id(s), comma-separated, for its CPU")
    p.add_argument("--raw-out", help="write per-job records (JSON lines) to this file")
    p.add_argument("--plant-delay-us", type=int, default=0, help=argparse.SUPPRESS)
    return p


def run_add_sync(o: argparse.Namespace) -> dict[str, Any]:
    """`add-sync`: a task's `.delay()` from sync code, one job at a time (as Celery's
    `.delay()` and RQ's `enqueue`), through the sync API."""
    from ..sync import Queue as SyncQueue
    from ..tasks import configure_tasks, task
    from ..version import __version__

    url = o.url or f"valkey://{o.host}:{o.port}"
    server_pid = int(str(o.server_pid).split(",")[0]) if o.server_pid else None
    configure_tasks(connection=url)

    @task(o.queue, name="noop", remove_on_complete=True)
    def noop(i: int) -> None: ...

    q: SyncQueue[Any, Any]
    with SyncQueue(o.queue, connection=url) as q:
        q.obliterate(force=True)  # connected, the library loaded: as every add scenario
        w = _Window(server_pid)
        for i in range(o.jobs):
            noop.delay(i)
        result: dict[str, Any] = {"jobs": o.jobs, **w.close()}
    result.update(system="glidemq", scenario=o.scenario, pid=os.getpid(), version=__version__)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    o = build_parser().parse_args(argv)
    if o.scenario == "add-sync":
        os.write(1, orjson.dumps(run_add_sync(o)) + b"\n")
        return 0
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        result = runner.run(run_scenario(o))
    os.write(1, orjson.dumps(result) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
