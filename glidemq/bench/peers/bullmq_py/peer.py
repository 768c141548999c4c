"""BullMQ for Python side of glidemq-bench: runs one scenario against a Valkey server and
prints one JSON object on stdout, the same shape as the Node peer's (../bullmq/peer.mjs).

Run by this directory's own virtualenv, which glidemq-bench installs on first use:

    .venv/bin/python peer.py SCENARIO --port P [--host H] [--queue Q] [--jobs N]
        [--concurrency C] [--inflight K] [--chunk N] [--rate R] [--seconds S] [--batch B]
        [--server-pid P1,P2] [--raw-out FILE]

Scenarios this peer does not implement print `{"jobs": 0, "unsupported": "<why>"}`.
Only the package's public API (Queue, Worker) is used; nothing here imports glidemq.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import bullmq
from bullmq import Queue, Worker

SUPPORTED = (
    *("add-single", "add-concurrent", "add-bulk", "process", "latency"),
    *("batch", "memory", "cpu"),
)
UNSUPPORTED = {
    "sandbox": "BullMQ for Python has no sandboxed (child-process) processors",
    "procs": "not implemented by the BullMQ for Python peer (no multi-process runner)",
    "cluster": "not implemented by the BullMQ for Python peer",
}

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_RSS_INTERVAL = 0.5


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` from /proc (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * _PAGE / (1 << 20)


class Window:
    """Wall time, CPU of this process and CPU of the server over a measured window."""

    def __init__(self, server_pids: list[int]) -> None:
        self.server_pids = server_pids
        self.t0 = time.perf_counter()
        self.c0 = _self_cpu()
        self.s0 = self._server()

    def _server(self) -> float:
        return sum(_proc_cpu(pid) for pid in self.server_pids)

    def close(self) -> dict[str, float]:
        return {
            "seconds": time.perf_counter() - self.t0,
            "client_cpu": _self_cpu() - self.c0,
            "server_cpu": self._server() - self.s0,
        }


class RawRecorder:
    """Per-job records from `completed` events, written as JSON lines with --raw-out."""

    def __init__(self, path: str, queue: str) -> None:
        self.path = path
        self.queue = queue
        self.rows: list[dict[str, Any]] = []

    def add(self, job: Any) -> None:
        if self.path:
            self.rows.append(
                {
                    "queue": self.queue,
                    "job_id": str(job.id),
                    "enqueued_ms": job.timestamp,
                    "started_ms": job.processedOn or None,
                    "finished_ms": job.finishedOn or time.time() * 1000,
                    "pid": os.getpid(),
                }
            )

    def write(self) -> None:
        if self.path:
            with open(self.path, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in self.rows)


async def _noop(job: Any, token: str) -> None:
    return None


async def _prefill(queue: Any, n: int, chunk: int) -> None:
    for start in range(0, n, chunk):
        await queue.addBulk(
            [
                {"name": "noop", "data": {"i": i}, "opts": {"removeOnComplete": True}}
                for i in range(start, min(n, start + chunk))
            ]
        )


async def _add(o: argparse.Namespace, queue: Any) -> dict[str, Any]:
    w = Window(o.server_pids)
    if o.scenario == "add-single":
        for i in range(o.jobs):
            await queue.add("noop", {"i": i}, {"removeOnComplete": True})
    elif o.scenario == "add-concurrent":
        counter = iter(range(o.jobs))

        async def lane() -> None:
            for i in counter:
                await queue.add("noop", {"i": i})

        await asyncio.gather(*(lane() for _ in range(o.inflight)))
    else:
        await _prefill(queue, o.jobs, o.chunk)
    return {"jobs": o.jobs, **w.close()}


async def _drain(
    o: argparse.Namespace,
    conn: dict[str, Any],
    concurrency: int,
    on_completed: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Pre-fill `jobs` no-op jobs, start one worker, time it to the last completion."""
    done = 0
    finished = asyncio.Event()

    def completed(job: Any, result: Any) -> None:
        nonlocal done
        done += 1
        if on_completed is not None:
            on_completed(job)
        if done >= o.jobs:
            finished.set()

    w = Window(o.server_pids)
    worker = Worker(
        o.queue, _noop,
        {"connection": conn, "concurrency": concurrency, "removeOnComplete": {"count": 0}},
    )  # fmt: skip
    worker.on("completed", completed)
    await finished.wait()
    result = {"jobs": o.jobs, **w.close()}
    # Every job is done: a forced close only stops the idle fetches still blocked.
    await worker.close(force=True)
    return result


async def _memory(o: argparse.Namespace, conn: dict[str, Any]) -> dict[str, Any]:
    """RSS of this process over `jobs` no-op jobs, sampled every 0.5 s (the others' rule)."""
    samples: list[tuple[float, int, float]] = []
    done = 0

    def completed(job: Any, result: Any) -> None:
        nonlocal done
        done += 1

    w = Window(o.server_pids)
    start = _rss_mb()
    worker = Worker(
        o.queue, _noop,
        {"connection": conn, "concurrency": o.concurrency, "removeOnComplete": {"count": 0}},
    )  # fmt: skip
    worker.on("completed", completed)
    while done < o.jobs:
        samples.append((time.perf_counter() - w.t0, done, _rss_mb()))
        await asyncio.sleep(_RSS_INTERVAL)
    result = {"jobs": o.jobs, **w.close()}
    samples.append((result["seconds"], done, _rss_mb()))
    await worker.close(force=True)
    warm = next((rss for _, d, rss in samples if d >= o.jobs // 10), samples[0][2])
    end = samples[-1][2]
    return {
        **result,
        "rss_start_mb": start,
        "rss_warm_mb": warm,
        "rss_end_mb": end,
        "rss_peak_mb": max(rss for _, _, rss in samples),
        "rss_growth_mb": end - warm,
        "rss_flat": end - warm <= max(16.0, 0.1 * warm),
        "rss_samples": [[round(t, 3), d, round(rss, 2)] for t, d, rss in samples],
    }


async def _latency(o: argparse.Namespace, conn: dict[str, Any], queue: Any) -> dict[str, Any]:
    """Open-loop adds at a fixed rate; add (producer clock) to completion, per job."""
    total = round(o.rate * o.seconds)
    latencies: list[float] = []
    finished = asyncio.Event()

    def completed(job: Any, result: Any) -> None:
        latencies.append(time.time() * 1000 - job.data["t"])
        if len(latencies) == total:
            finished.set()

    worker = Worker(o.queue, _noop, {"connection": conn, "concurrency": 10})
    worker.on("completed", completed)
    await asyncio.sleep(0.2)
    w = Window(o.server_pids)
    t0 = time.perf_counter()
    adds: list[asyncio.Future[Any]] = []
    for i in range(total):
        # Open loop: each add is due at a fixed time, whether earlier ones finished or not.
        wait = t0 + i / o.rate - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        adds.append(
            asyncio.ensure_future(
                queue.add("noop", {"t": time.time() * 1000}, {"removeOnComplete": True})
            )
        )
    await asyncio.gather(*adds)
    await asyncio.wait_for(finished.wait(), 60)
    result = {"jobs": total, "latencies_ms": latencies, **w.close()}
    await worker.close(force=True)
    return result


async def run_scenario(o: argparse.Namespace) -> dict[str, Any]:
    """Run one supported scenario and return its measurements."""
    conn: dict[str, Any] = {"host": o.host, "port": o.port}
    queue = Queue(o.queue, {"connection": conn})
    await queue.obliterate(force=True)
    raw = RawRecorder(o.raw_out, o.queue)
    result: dict[str, Any]
    if o.scenario.startswith("add-"):
        result = await _add(o, queue)
    elif o.scenario == "latency":
        result = await _latency(o, conn, queue)
    else:
        await _prefill(queue, o.jobs, o.chunk)
        if o.scenario == "memory":
            result = await _memory(o, conn)
        elif o.scenario == "batch":
            # No batch worker in BullMQ: a plain worker with the same jobs in flight (c x b),
            # as the Node peer does.
            result = await _drain(o, conn, o.concurrency * o.batch, raw.add)
            result.update(
                batch=o.batch, note="no batch worker in BullMQ: plain worker, same jobs in flight"
            )
        else:  # process, cpu
            result = await _drain(o, conn, o.concurrency, raw.add)
            if o.scenario == "cpu":
                cpu = result["server_cpu"] + result["client_cpu"]
                result["cpu_us_per_job"] = 1e6 * cpu / o.jobs
    raw.write()
    await queue.obliterate(force=True)
    await queue.close()
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="peer.py")
    p.add_argument("scenario", choices=(*SUPPORTED, *UNSUPPORTED))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--queue", default="bench-bullmq-py")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--inflight", type=int, default=50)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--queues", type=int, default=6)
    p.add_argument("--url", default="")
    p.add_argument("--server-pid", default="")
    p.add_argument("--raw-out", default="")
    return p


def main(argv: list[str] | None = None) -> int:
    o = build_parser().parse_args(argv)
    o.server_pids = [int(p) for p in o.server_pid.split(",") if p]
    if o.scenario in UNSUPPORTED:
        result: dict[str, Any] = {"jobs": 0, "unsupported": UNSUPPORTED[o.scenario]}
    else:
        try:
            import uvloop

            factory: Any = uvloop.new_event_loop
        except ImportError:
            factory = None
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(run_scenario(o))
    result.update(system="bullmq-py", scenario=o.scenario, pid=os.getpid())
    result["version"] = bullmq.__version__
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
