"""A worker process of `glidemq-run`: imports the processor, runs one Worker per queue on
uvloop, and reports to the supervisor every second from its event loop. The supervisor has
set the process up (`glidemq.process.setup.run_as_child`) before `run_worker_process` runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import traceback
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..client.connection import ConnectionOptions
from ..errors import GlideMQError
from ..process.loop import loop_factory
from ..process.memory import rss_bytes
from ..processor import ProcessorSpec, load_processor
from ..queue.queue import Queue
from ..sandbox.types import SandboxOptions
from ..tasks import configure_tasks
from ..types import BatchOptions, WorkerOptions, from_mapping
from ..worker.worker import Worker
from . import ipc
from .config import ExitCode, RuntimeConfig
from .reclaim import Holding, holding_of, reclaim

__all__ = ["WorkerProcess", "run_worker_process"]

log = logging.getLogger("glidemq.run")

HEARTBEAT_INTERVAL = 1.0
COUNTS_INTERVAL = 5.0
RUNNING = 20  # jobs named in each heartbeat's list of what the process runs
RECLAIM_WAIT = 5.0  # how long a stopping process still lets a reclaim of dead siblings finish


def _worker_options(cfg: RuntimeConfig, spec: ProcessorSpec) -> WorkerOptions:
    values: dict[str, Any] = dict(spec.options)
    if cfg.concurrency is not None:
        values["concurrency"] = cfg.concurrency
    if cfg.prefetch is not None:
        values["prefetch"] = cfg.prefetch
    if cfg.hold_window_ms is not None:
        values["hold_window"] = cfg.hold_window_ms
    if cfg.lock_duration_ms is not None:
        values["lock_duration"] = cfg.lock_duration_ms
    if cfg.stalled_interval_ms is not None:
        values["stalled_interval"] = cfg.stalled_interval_ms
    values["close_timeout"] = cfg.grace
    if cfg.batch_size is not None or spec.batch:
        values["batch"] = BatchOptions(size=cfg.batch_size or 10, timeout_ms=cfg.batch_timeout_ms)
    if cfg.sandbox:
        # With --sandbox the recycling limits apply to the sandbox children, which run the
        # user's code; the worker process holding the connection stays.
        declared = values.get("sandbox")
        sandbox = declared if isinstance(declared, SandboxOptions) else SandboxOptions()
        if cfg.max_jobs_per_child is not None:
            sandbox = replace(sandbox, max_jobs_per_child=cfg.max_jobs_per_child)
        if cfg.max_memory_per_child_mb is not None:
            sandbox = replace(sandbox, max_memory_per_child_mb=cfg.max_memory_per_child_mb)
        values["sandbox"] = sandbox
    return from_mapping(WorkerOptions, values)


def _queues(cfg: RuntimeConfig, spec: ProcessorSpec) -> tuple[str, ...]:
    return cfg.queues or spec.queues


class WorkerProcess:
    """One worker process's side of `glidemq-run`: its Workers, its stop request and its
    reports to the supervisor."""

    def __init__(
        self,
        cfg: RuntimeConfig,
        spec: ProcessorSpec,
        conn: ConnectionOptions,
        slot: int,
        fd: int,
        orphans: Sequence[Holding] = (),
    ) -> None:
        self.cfg = cfg
        self.orphans = list(orphans)
        self.spec = spec
        self.conn = conn
        self.slot = slot
        self.fd = fd
        self.parent = os.getppid()
        self.workers: list[Worker[Any, Any]] = []
        self.stop = asyncio.Event()
        self.mode = "graceful"
        self.reason = "signal"
        self.forcing: set[asyncio.Task[None]] = set()
        # Jitter the recycle point so a fleet started together does not recycle together.
        limit = None if cfg.sandbox else cfg.max_jobs_per_child  # --sandbox: children's limit
        self.max_jobs = None if limit is None else max(1, limit - random.randint(0, limit // 10))

    def send(self, message: dict[str, Any]) -> None:
        try:
            ipc.write_frame(self.fd, message)
        except OSError:
            self.request_stop("graceful", "supervisor-gone")

    def request_stop(self, mode: str, reason: str) -> None:
        if self.stop.is_set():
            if mode == "immediate" and self.mode != "immediate":
                self.mode = "immediate"
                # a drain in progress stops waiting for its running jobs
                loop = asyncio.get_running_loop()
                for w in self.workers:
                    task = loop.create_task(w.close(force=True))
                    self.forcing.add(task)
                    task.add_done_callback(self.forcing.discard)
            return
        self.mode, self.reason = mode, reason
        self.stop.set()

    def job_done(self, *_: Any) -> None:
        """Stop taking jobs once --max-jobs-per-child is reached."""
        if self.max_jobs is None or self.stop.is_set():
            return
        if sum(w.completed_count + w.failed_count for w in self.workers) >= self.max_jobs:
            self.request_stop("graceful", "max-jobs")

    def counters(self) -> dict[str, Any]:
        completed = sum(w.completed_count for w in self.workers)
        failed = sum(w.failed_count for w in self.workers)
        active = sum(w.active_count for w in self.workers)
        # what it runs, so that the supervisor can say it should this process die
        running = [[w.name, j.id, j.name] for w in self.workers for j in w.running_jobs(RUNNING)]
        return {
            "completed": completed,
            "failed": failed,
            "active": active,
            "rss": rss_bytes(),
            "running": running[:RUNNING],
        }

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop, "graceful", "SIGTERM")
        loop.add_signal_handler(signal.SIGQUIT, self.request_stop, "immediate", "SIGQUIT")
        try:
            options = _worker_options(self.cfg, self.spec)
            for name in _queues(self.cfg, self.spec):
                worker: Worker[Any, Any] = Worker(
                    name,
                    self.cfg.target if self.cfg.sandbox else self.spec.function,
                    connection=self.conn,
                    prefix=self.cfg.prefix,
                    options=options,
                )
                self.workers.append(worker)
                if self.spec.setup is not None:
                    self.spec.setup(worker)
                if self.max_jobs is not None:
                    # checked on every job, not only at heartbeats: fast jobs overshoot a lot
                    worker.on("completed", self.job_done)
                    worker.on("failed", self.job_done)
            # Before the first job: if this process is killed, the supervisor knows whose
            # jobs to hand back.
            holdings = [
                holding_of(w.name, self.cfg.prefix, w.consumer, options) for w in self.workers
            ]
            self.send({"type": ipc.HOLDINGS, "holdings": [h.to_wire() for h in holdings]})
            for worker in self.workers:
                await worker.start()
            # --sandbox: ready only once a sandbox child has loaded the processor; if none
            # can, this is a boot failure (the jobs stay waiting, none is taken).
            for w in self.workers:
                if w.sandbox_pool is not None:
                    await w.sandbox_pool.wait_started()
        except BaseException as exc:
            self.send(
                {
                    "type": ipc.BOOT_ERROR,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
            )
            for w in self.workers:
                await w.close(force=True)
            return ExitCode.BOOT
        self.send({"type": ipc.READY, "queues": list(_queues(self.cfg, self.spec))})
        reporter = loop.create_task(self.report_loop())
        reclaimer = loop.create_task(self.reclaim_orphans()) if self.orphans else None
        await self.stop.wait()
        if reclaimer is not None:
            # short, and it frees jobs of dead siblings: let it finish unless it hangs
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reclaimer), RECLAIM_WAIT)
            reclaimer.cancel()
            await asyncio.gather(reclaimer, return_exceptions=True)
        self.send(
            {"type": ipc.EXITING, "reason": self.reason, "mode": self.mode, **self.counters()}
        )
        force = self.mode == "immediate"
        await asyncio.gather(
            *(w.close(force=force, timeout=self.cfg.grace) for w in self.workers),
            return_exceptions=True,
        )
        reporter.cancel()
        await asyncio.gather(reporter, return_exceptions=True)
        self.send({"type": ipc.HEARTBEAT, "final": True, **self.counters()})
        return ExitCode.OK

    async def reclaim_orphans(self) -> None:
        """Hand back the jobs of dead sibling processes the supervisor gave this one."""
        try:
            done, requeued, failed = await reclaim(
                self.conn, self.orphans, name=f"glidemq-run-reclaim-{os.getpid()}"
            )
        except GlideMQError as exc:
            log.warning("could not reclaim the jobs of dead workers: %s", exc)
            return
        if requeued or failed:
            log.info(
                "handed back %d jobs of dead workers (%d failed: stalled too often)",
                requeued + failed,
                failed,
            )
        self.send({"type": ipc.RECLAIMED, "done": [list(k) for k in done]})

    async def report_loop(self) -> None:
        queues: list[Queue[Any, Any]] = []
        if self.slot == 0 and self.cfg.metrics_port is not None:
            queues = [
                Queue(n, connection=self.conn, prefix=self.cfg.prefix)
                for n in _queues(self.cfg, self.spec)
            ]
        last_counts = 0.0
        counts: dict[str, dict[str, int]] = {}
        backlogs: dict[str, dict[str, Any]] = {}
        try:
            while True:
                await asyncio.sleep(HEARTBEAT_INTERVAL)
                if os.getppid() != self.parent:
                    self.request_stop("graceful", "supervisor-gone")
                    return
                stats = self.counters()
                loop_now = asyncio.get_running_loop().time()
                if queues and loop_now - last_counts >= COUNTS_INTERVAL:
                    last_counts = loop_now
                    for q in queues:
                        with contextlib.suppress(GlideMQError):
                            counts[q.name] = (await q.get_job_counts()).as_dict()
                        with contextlib.suppress(GlideMQError):
                            backlogs[q.name] = (await q.get_backlog()).as_dict()
                message: dict[str, Any] = {"type": ipc.HEARTBEAT, **stats}
                if counts:
                    message["queues"] = counts
                if backlogs:
                    message["backlog"] = backlogs
                self.send(message)
                done = stats["completed"] + stats["failed"]
                if self.max_jobs is not None and done >= self.max_jobs:
                    self.request_stop("graceful", "max-jobs")
                limit = None if self.cfg.sandbox else self.cfg.max_memory_per_child_mb
                if limit is not None and stats["rss"] > limit * 1024 * 1024:
                    self.request_stop("graceful", "max-memory")
        finally:
            for q in queues:
                await q.close()


def run_worker_process(
    cfg: RuntimeConfig,
    conn: ConnectionOptions,
    slot: int,
    fd: int,
    orphans: Sequence[Holding] = (),
) -> int:
    """Body of a forked worker process; returns its exit code. `orphans`: holdings of dead
    sibling processes whose jobs it hands back once it is ready."""
    try:
        configure_tasks(connection=conn, prefix=cfg.prefix)  # tasks added from tasks go here
        spec = load_processor(cfg.target)
        if not _queues(cfg, spec):
            raise GlideMQError("no queue: pass --queue or declare it with @glidemq.processor")
    except BaseException as exc:
        ipc.write_frame(
            fd,
            {
                "type": ipc.BOOT_ERROR,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            },
        )
        return ExitCode.BOOT
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(WorkerProcess(cfg, spec, conn, slot, fd, orphans).serve())
