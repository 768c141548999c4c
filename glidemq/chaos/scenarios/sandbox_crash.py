"""sandbox-crash: SIGKILL the sandbox children of `glidemq-run --sandbox` while jobs run.

A killed child fails the job it was running (one attempt used, with a reason naming the
signal) and is replaced; the worker process holding the connection carries on. Jobs get
several attempts here, so they all complete unless one is hit on every attempt.
"""

from __future__ import annotations

import asyncio
import signal

from ..context import ChaosRun
from ..faults import kill_process, wait_gone
from ..outcomes import Prediction
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["CHILD_KILLED", "CHILD_KILLED_LOADING", "SandboxCrash"]

CHILD_KILLED = Prediction(
    pattern=r"sandbox child \(pid \d+\) was killed by signal SIGKILL",
    kinds=("sigkill-sandbox-child",),
    because="a SIGKILLed sandbox child fails the attempt it was running; a job that was "
    "on its last attempt fails for good",
)
CHILD_KILLED_LOADING = Prediction(
    pattern=r"sandbox child was killed by signal SIGKILL \(9\) while loading",
    kinds=("sigkill-sandbox-child",),
    because="the victim was a replacement child still loading the processor: the jobs "
    "waiting for a child fail that attempt with the boot error (all of them, not one)",
)


@register
class SandboxCrash(Scenario):
    name = "sandbox-crash"
    summary = "SIGKILL sandbox children (glidemq-run --sandbox): jobs retry, workers survive"
    defaults = FleetSettings(
        procs=2, concurrency=4, job_ms=30.0, sandbox=True, attempts=5, faults=5
    )
    predictions = (CHILD_KILLED, CHILD_KILLED_LOADING)

    async def inject(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        workers = await run.wait_workers(run.settings.procs)
        run.extra["_worker_pids"] = sorted(p.pid for p in workers)
        for point in run.fault_points(run.settings.faults):
            await run.wait_progress(point)
            children = run.fleet.sandbox_children()
            while not children:
                await asyncio.sleep(0.02)
                children = run.fleet.sandbox_children()
            victim = run.rng.choice(children)
            if kill_process(victim, signal.SIGKILL):
                run.fault("sigkill-sandbox-child", victim.pid, children=len(children))
                await wait_gone(victim, 5.0)  # the next fault picks among live children
        # the worker processes must outlive every crash of their children
        await run.wait_progress(1.0, timeout=run.args.drain_timeout)
        alive = sorted(p.pid for p in run.fleet.workers())
        if alive != run.extra["_worker_pids"]:
            run.problem(
                f"a sandbox crash took a worker process down: worker pids were "
                f"{run.extra['_worker_pids']}, now {alive}"
            )

    def check(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        started = run.fleet.log_text().count("started worker slot")
        run.extra["worker_processes_started"] = started
        if started != run.settings.procs:
            run.problem(
                f"a sandbox crash took a worker process down (started {started} "
                f"worker processes for {run.settings.procs} slots)"
            )
