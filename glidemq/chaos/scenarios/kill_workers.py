"""kill-workers: SIGKILL random glidemq-run worker processes while jobs flow.

The supervisor replaces each one at once; the jobs it held come back through stall
recovery (after about lock duration + stalled interval). Jobs it had finished but not yet
reported complete run again: that is where duplicates come from.
"""

from __future__ import annotations

import signal

from ..context import ChaosRun
from ..faults import kill_process, process_tree
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["KillWorkers"]


@register
class KillWorkers(Scenario):
    name = "kill-workers"
    summary = "SIGKILL random glidemq-run worker processes during a run"
    defaults = FleetSettings(procs=3, concurrency=4, job_ms=30.0, faults=3)

    async def inject(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        for point in run.fault_points(run.settings.faults):
            await run.wait_progress(point)
            # a victim among the ready ones: killing a process still booting tests nothing
            workers = await run.wait_workers(1)
            victim = run.rng.choice(workers)
            hurt = process_tree(victim)
            kill_process(victim, signal.SIGKILL)
            run.fault("sigkill-worker", victim.pid, pids=hurt, workers=len(workers))
