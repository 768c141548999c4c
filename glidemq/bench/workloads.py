"""glidemq side of the scenarios beyond plain add/process: sandbox, batch, cluster, memory
and cpu (see docs/BENCHMARKS.md). Each returns the result fields of one run; the runner
(`glidemq.bench.scenario`) adds the common ones.

Client CPU here is this process plus its descendants (sandbox children), read from /proc,
so a system that works in child processes is not flattered; server CPU is the sum over the
server's processes (every primary of a cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from typing import Any

import orjson
import psutil

from ..job.job import Job
from ..process.memory import rss_bytes
from ..queue.queue import Queue
from ..sandbox.types import SandboxOptions
from ..types import BatchOptions
from ..worker.worker import Worker
from .cpu import process_cpu_seconds

__all__ = [
    "RawRecorder",
    "Window",
    "noop_pid",
    "prefill",
    "run_batch",
    "run_cluster",
    "run_cpu",
    "run_fair",
    "run_memory",
    "run_sandbox",
]

_RSS_INTERVAL = 0.5  # seconds between RSS samples of the memory scenario


async def noop_pid(job: Job[Any, Any]) -> int:
    """The processor of the new scenarios: nothing, but says which process ran it."""
    return os.getpid()


async def _batch_noop(jobs: list[Job[Any, Any]]) -> list[None]:
    return [None] * len(jobs)


def _tree_cpu() -> float:
    """CPU seconds of this process and every live descendant."""
    me = psutil.Process()
    total = float(sum(me.cpu_times()[:2]))
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # exited meanwhile
            total += sum(child.cpu_times()[:2])
    return total


def _servers_cpu(pids: Sequence[int]) -> float:
    return sum(process_cpu_seconds(pid) for pid in pids)


class Window:
    """Wall time and CPU (this process tree, the servers) over a measured window."""

    def __init__(self, server_pids: Sequence[int]) -> None:
        self.server_pids = list(server_pids)
        self.t0 = time.perf_counter()
        self.c0 = _tree_cpu()
        self.s0 = _servers_cpu(self.server_pids)

    def close(self) -> dict[str, float]:
        """seconds, client_cpu and server_cpu since the window opened."""
        return {
            "seconds": time.perf_counter() - self.t0,
            "client_cpu": _tree_cpu() - self.c0,
            "server_cpu": _servers_cpu(self.server_pids) - self.s0,
        }


class RawRecorder:
    """Per-job records (queue, job id, enqueued, started, finished, pid), kept from the
    workers' `completed` events and written as JSON lines for the harness to turn into Parquet.

    `finished` is when the worker saw the completion (epoch ms); the others come from the
    job. `pid` is the process that ran the processor when it returned its pid, else this
    process."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.rows: list[tuple[str, str, int, int | None, float, int]] = []
        self._pid = os.getpid()

    def attach(self, worker: Worker[Any, Any]) -> None:
        """Record every job `worker` completes (nothing when no path was given)."""
        if self.path is not None:
            worker.on("completed", self._completed)

    def _completed(self, job: Job[Any, Any], result: Any) -> None:
        pid = result if isinstance(result, int) else self._pid
        now = time.time() * 1000
        self.rows.append((job.queue_name, job.id, job.timestamp, job.processed_on, now, pid))

    def write(self) -> None:
        """Write the records (one JSON object per line) to the path, if any."""
        if self.path is None:
            return
        keys = ("queue", "job_id", "enqueued_ms", "started_ms", "finished_ms", "pid")
        with open(self.path, "wb") as fh:
            for row in self.rows:
                fh.write(orjson.dumps(dict(zip(keys, row, strict=True))) + b"\n")


async def prefill(q: Queue[Any, Any], n: int, chunk: int = 1000, remove: bool = True) -> None:
    """Add `n` no-op jobs in bulk chunks."""
    opts = {"remove_on_complete": True} if remove else {}
    for start in range(0, n, chunk):
        await q.add_bulk(
            [
                {"name": "noop", "data": {"i": i}, "opts": opts}
                for i in range(start, min(n, start + chunk))
            ]
        )


async def _drain(workers: Sequence[Worker[Any, Any]], n: int) -> None:
    # Polling a counter costs nothing per job; a per-job event handler would.
    while sum(w.completed_count for w in workers) < n:  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def run_sandbox(o: argparse.Namespace, q: Queue[Any, Any], url: str) -> dict[str, Any]:
    """No-op jobs through a sandboxed Worker (default SandboxOptions, children warm before
    the clock starts), after the same jobs in-process in the same run for the ratio."""
    target = "glidemq.bench.workloads:noop_pid"
    await prefill(q, o.jobs, o.chunk)
    w = Window(o.server_pids)
    inproc: Worker[Any, Any] = Worker(o.queue, noop_pid, connection=url, concurrency=o.concurrency)
    await inproc.start()
    await _drain([inproc], o.jobs)
    inproc_window = w.close()
    await inproc.close()
    await prefill(q, o.jobs, o.chunk)
    raw = RawRecorder(o.raw_out)
    sandboxed: Worker[Any, Any] = Worker(
        o.queue, target, connection=url, concurrency=o.concurrency, sandbox=SandboxOptions()
    )
    raw.attach(sandboxed)
    sandboxed.pause()
    await sandboxed.start()
    pool = sandboxed.sandbox_pool
    assert pool is not None
    while pool.stats()["ready"] < pool.size:  # noqa: ASYNC110 - start-up is not measured
        await asyncio.sleep(0.005)
    w = Window(o.server_pids)
    sandboxed.resume()
    await _drain([sandboxed], o.jobs)
    result = {"jobs": o.jobs, **w.close()}
    children = len(pool.pids)
    await sandboxed.close()
    raw.write()
    return {
        **result,
        "children": children,
        "inprocess_seconds": inproc_window["seconds"],
        "inprocess_jobs_per_s": o.jobs / inproc_window["seconds"],
        "inprocess_client_cpu": inproc_window["client_cpu"],
    }


async def run_batch(o: argparse.Namespace, q: Queue[Any, Any], url: str) -> dict[str, Any]:
    """No-op jobs through a batch Worker: `concurrency` batches of `batch` jobs at once."""
    await prefill(q, o.jobs, o.chunk)
    raw = RawRecorder(o.raw_out)
    w = Window(o.server_pids)
    worker: Worker[Any, Any] = Worker(
        o.queue,
        _batch_noop,  # type: ignore[arg-type]  # batch mode: the processor takes the list
        connection=url,
        concurrency=o.concurrency,
        batch=BatchOptions(size=o.batch, timeout_ms=5),
    )
    raw.attach(worker)
    await worker.start()
    await _drain([worker], o.jobs)
    result = {"jobs": o.jobs, **w.close(), "batch": o.batch}
    await worker.close()
    raw.write()
    return result


async def run_cluster(o: argparse.Namespace, url: str) -> dict[str, Any]:
    """`queues` queues on a cluster (each queue lives in one slot, so they spread over the
    primaries), one Worker each in this process, `jobs` in total."""
    names = [f"{o.queue}-{i}" for i in range(o.queues)]
    queues: list[Queue[Any, Any]] = [Queue(name, connection=url) for name in names]
    per = o.jobs // o.queues
    raw = RawRecorder(o.raw_out)
    try:
        for q in queues:
            await q.obliterate(force=True)
            await prefill(q, per, o.chunk)
        workers: list[Worker[Any, Any]] = [
            Worker(name, noop_pid, connection=url, concurrency=o.concurrency) for name in names
        ]
        for worker in workers:
            raw.attach(worker)
        w = Window(o.server_pids)
        await asyncio.gather(*(worker.start() for worker in workers))
        await _drain(workers, per * o.queues)
        result = {"jobs": per * o.queues, **w.close(), "queues": o.queues}
        await asyncio.gather(*(worker.close() for worker in workers))
        for q in queues:
            await q.obliterate(force=True)
    finally:
        for q in queues:
            await q.close()
    raw.write()
    return result


def _rss_mb() -> float:
    return rss_bytes() / (1 << 20)


async def run_memory(o: argparse.Namespace, q: Queue[Any, Any], url: str) -> dict[str, Any]:
    """RSS of one Worker process over `jobs` no-op jobs, sampled every 0.5 s.

    Flat means the RSS at the end is within max(16 MiB, 10%) of the RSS once a tenth of the
    jobs ran (allocator pools and caches have grown by then)."""
    await prefill(q, o.jobs, o.chunk)
    worker: Worker[Any, Any] = Worker(o.queue, noop_pid, connection=url, concurrency=o.concurrency)
    samples: list[tuple[float, int, float]] = []
    w = Window(o.server_pids)
    start_rss = _rss_mb()
    await worker.start()
    while worker.completed_count < o.jobs:
        samples.append((time.perf_counter() - w.t0, worker.completed_count, _rss_mb()))
        await asyncio.sleep(_RSS_INTERVAL)
    result = {"jobs": o.jobs, **w.close()}
    samples.append((result["seconds"], worker.completed_count, _rss_mb()))
    await worker.close()
    warm = next((rss for _, done, rss in samples if done >= o.jobs // 10), samples[0][2])
    end = samples[-1][2]
    return {
        **result,
        "rss_start_mb": start_rss,
        "rss_warm_mb": warm,
        "rss_end_mb": end,
        "rss_peak_mb": max(rss for _, _, rss in samples),
        "rss_growth_mb": end - warm,
        "rss_flat": end - warm <= max(16.0, 0.1 * warm),
        "rss_samples": [[round(t, 3), done, round(rss, 2)] for t, done, rss in samples],
    }


async def run_cpu(o: argparse.Namespace, q: Queue[Any, Any], url: str) -> dict[str, Any]:
    """The `process` run judged by CPU: server and client CPU microseconds per job, from
    /proc (client: this process and its descendants)."""
    await prefill(q, o.jobs, o.chunk)
    raw = RawRecorder(o.raw_out)
    worker: Worker[Any, Any] = Worker(o.queue, noop_pid, connection=url, concurrency=o.concurrency)
    raw.attach(worker)
    w = Window(o.server_pids)
    await worker.start()
    await _drain([worker], o.jobs)
    result = {"jobs": o.jobs, **w.close()}
    await worker.close()
    raw.write()
    cpu = result["server_cpu"] + result["client_cpu"]
    return {**result, "cpu_us_per_job": 1e6 * cpu / o.jobs}


_BACKLOG = 2_000  # the big tenant's jobs ahead of the small one in the fairness probe
_SMALL = 10


async def _timed_drain(q: Queue[Any, Any], url: str, o: argparse.Namespace) -> dict[str, Any]:
    worker: Worker[Any, Any] = Worker(o.queue, noop_pid, connection=url, concurrency=o.concurrency)
    w = Window(o.server_pids)
    await worker.start()
    await _drain([worker], o.jobs)
    result = w.close()
    await worker.close()
    return result


async def run_fair(o: argparse.Namespace, q: Queue[Any, Any], url: str) -> dict[str, Any]:
    """Fair groups: the same no-op jobs without groups, then spread over `queues` fair groups
    (weight 1) for the throughput cost of fairness; then a small tenant's 10 jobs behind a
    big tenant's 2,000 for the time to the small tenant's first and last completion."""
    await prefill(q, o.jobs, o.chunk)
    plain = await _timed_drain(q, url, o)
    for start in range(0, o.jobs, o.chunk):
        await q.add_bulk(
            [
                {
                    "name": "noop",
                    "data": {"i": i},
                    "opts": {"remove_on_complete": True, "group_key": f"t{i % o.queues}",
                             "group_weight": 1},
                }
                for i in range(start, min(o.jobs, start + o.chunk))
            ]
        )  # fmt: skip
    fair = await _timed_drain(q, url, o)
    await q.obliterate(force=True)
    order: list[str] = []
    at: list[float] = []

    async def record(job: Job[Any, Any]) -> None:
        order.append(job.data)
        at.append(time.perf_counter())

    fair_opts = {"group_weight": 1, "remove_on_complete": True}
    await q.add_bulk([("j", "big", {"group_key": "big", **fair_opts})] * _BACKLOG)
    await q.add_bulk([("j", "small", {"group_key": "small", **fair_opts})] * _SMALL)
    probe: Worker[Any, Any] = Worker(o.queue, record, connection=url, concurrency=o.concurrency)
    t0 = time.perf_counter()
    await probe.start()
    while order.count("small") < _SMALL:  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    await probe.close(force=True)
    small = [i for i, t in enumerate(order) if t == "small"]
    await q.obliterate(force=True)
    return {
        "jobs": o.jobs,
        **fair,
        "queues": o.queues,
        "plain_jobs_per_s": o.jobs / plain["seconds"],
        "fair_cost": 1 - plain["seconds"] / fair["seconds"],
        "small_first_ms": 1000 * (at[small[0]] - t0),
        "small_last_ms": 1000 * (at[small[-1]] - t0),
        "small_done_within": small[-1] + 1,
    }
