"""hang-worker: freeze a glidemq-run worker process with SIGSTOP.

A frozen process sends no heartbeat and renews no lock. Two things must follow: other
processes take its jobs over once their locks expire (stall recovery), and the supervisor,
after `--heartbeat-timeout`, kills it (SIGTERM, then SIGKILL 3 s later: a stopped process
only dies of the second) and forks a replacement. With `--resume-after S` the process is
let go (SIGCONT) after S seconds instead, before the supervisor's deadline: its late
completions of jobs already taken over must then be refused by the server, each with one
log line in the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time

from ..context import ChaosRun
from ..faults import kill_process, process_tree, wait_gone
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["HangWorker"]

_KILL_AFTER_TERM = 3.0  # the supervisor's SIGTERM -> SIGKILL delay
STALE_LINE = "was reclaimed by another worker; result dropped"


@register
class HangWorker(Scenario):
    name = "hang-worker"
    summary = "SIGSTOP a glidemq-run worker process: the supervisor replaces it, its jobs rerun"
    defaults = FleetSettings(procs=3, concurrency=4, job_ms=30.0, faults=1, heartbeat_timeout=3.0)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--resume-after",
            type=float,
            metavar="SECONDS",
            help="SIGCONT the frozen process after this long instead of waiting for the "
            "supervisor to kill it (keep it under --heartbeat-timeout)",
        )

    def unavailable(self, args: argparse.Namespace) -> str | None:
        timeout = args.heartbeat_timeout
        if timeout is not None and timeout <= 0:
            return "hang-worker needs the supervisor's heartbeat check (--heartbeat-timeout > 0)"
        return super().unavailable(args)

    async def inject(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        resume = run.args.resume_after
        deadline = run.settings.heartbeat_timeout + _KILL_AFTER_TERM + 10.0
        killed_after: list[float] = []
        for point in run.fault_points(run.settings.faults):
            await run.wait_progress(point)
            workers = await run.wait_workers(run.settings.procs)
            victim = run.rng.choice(workers)
            hurt = process_tree(victim)
            kill_process(victim, signal.SIGSTOP)
            fault = run.fault("sigstop-worker", victim.pid, pids=hurt, resume_after_s=resume)
            if resume is not None:
                await asyncio.sleep(resume)
                kill_process(victim, signal.SIGCONT)
                fault.ended = time.time()
                continue
            gone = await wait_gone(victim, deadline)
            fault.ended = time.time()
            if gone is None:
                run.problem(
                    f"the frozen worker pid {victim.pid} was not killed by the "
                    f"supervisor within {deadline:g} s"
                )
                kill_process(victim, signal.SIGKILL)
            else:
                killed_after.append(round(gone, 3))
                run.say(f"supervisor killed frozen pid {victim.pid} after {gone:.1f} s")
            # the replacement must come up before the next fault
            await run.wait_workers(run.settings.procs)
        run.extra["hung_killed_after_s"] = killed_after

    def check(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        log = run.fleet.log_text()
        run.extra["stale_completions_logged"] = log.count(STALE_LINE)
        if run.args.resume_after is None:
            replaced = log.count("started worker slot")
            run.extra["workers_started"] = replaced
            if replaced < run.settings.procs + len(run.faults):
                run.problem(
                    f"expected a replacement per frozen worker; the supervisor started "
                    f"{replaced} processes for {run.settings.procs} slots and "
                    f"{len(run.faults)} faults"
                )
