"""backlog: a producer far faster than the consumers, then the catch-up.

Nothing is hurt on purpose: every job is added at full speed while a small fleet works,
so the queue grows to nearly the whole run, then drains. Reports how fast the producer
went, the peak backlog, and how long the fleet took to catch up.
"""

from __future__ import annotations

import asyncio
import time

from ..context import ChaosRun
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["Backlog"]


@register
class Backlog(Scenario):
    name = "backlog"
    summary = "producer far faster than the consumers, then catch-up"
    defaults = FleetSettings(procs=1, concurrency=4, job_ms=5.0, faults=0)

    async def inject(self, run: ChaosRun) -> None:
        producer = run.producer
        assert producer is not None
        await producer.done.wait()
        produced = time.time()
        produce_s = producer.finished_at - producer.started_at
        run.extra["produce_s"] = round(produce_s, 3)
        run.extra["produce_per_s"] = round(run.jobs / produce_s, 1) if produce_s > 0 else None
        run.extra["backlog_when_produced"] = max(0, run.jobs - run.progress.done)
        await run.wait_progress(1.0)
        catch_up = time.time() - produced
        run.extra["catch_up_s"] = round(catch_up, 3)
        left = run.extra["backlog_when_produced"]
        run.extra["catch_up_per_s"] = round(left / catch_up, 1) if catch_up > 0 else None
        server = run.target.standalone
        if server is not None and server.running:
            info = await asyncio.to_thread(server.execute, "INFO", "memory")
            for line in str(info).splitlines():
                if line.startswith("used_memory_peak:"):
                    run.extra["server_memory_peak_mb"] = round(int(line.split(":")[1]) / 2**20, 1)
