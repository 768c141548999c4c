"""aof-restart: SIGKILL Valkey (`appendonly yes`, `appendfsync everysec`) while the producer
adds at full speed, and start it again on the same directory.

A process kill loses nothing the server wrote to its AOF (the kernel keeps it), so every
add that was acknowledged before the kill must be there after the restart: the run reads
every acknowledged job's hash the moment the server is back and fails naming those that
are missing, before the workers could hide anything. The normal verdict then follows.
"""

from __future__ import annotations

import asyncio
import signal
import time

from ...keys import QueueKeys
from ..collect import read_jobs
from ..context import ChaosRun
from ..registry import register
from ..scenario import FleetSettings
from .server_restart import ServerRestart

__all__ = ["AofRestart"]


@register
class AofRestart(ServerRestart):
    name = "aof-restart"
    summary = "SIGKILL Valkey (AOF everysec) while adds flow; every acknowledged add survives"
    defaults = FleetSettings(procs=2, concurrency=8, job_ms=5.0, faults=1, rate=0.0)

    async def inject(self, run: ChaosRun) -> None:
        server = run.target.standalone
        assert server is not None and run.producer is not None and run.client is not None
        report = []
        for point in run.fault_points(run.settings.faults, 0.2, 0.7):
            # by adds, not completions: the kill must land while the producer is adding
            await _wait_added(run, point)
            acked = list(run.ledger.enqueued_ids)
            pid = server.pid
            server.kill(signal.SIGKILL)
            fault = run.fault("sigkill-server", pid, hits_all=True, acked=len(acked))
            await asyncio.sleep(run.args.down)
            await asyncio.to_thread(server.start, 30.0)
            fault.ended = time.time()
            records = await _read_back(run, acked)
            missing = sorted(j for j in acked if records.get(j) is None)
            report.append({"acked": len(acked), "missing": len(missing)})
            run.say(f"server back: {len(acked) - len(missing)} of {len(acked)} acknowledged adds")
            if missing:
                run.problem(
                    f"lost: {len(missing)} acknowledged adds missing after the restart from "
                    f"the AOF: {', '.join(missing[:20])}"
                )
        run.extra["aof_restart"] = report


async def _wait_added(run: ChaosRun, fraction: float) -> None:
    """Until the producer has `fraction` of the jobs acknowledged (or is done)."""
    assert run.producer is not None
    while run.producer.enqueued < fraction * run.jobs:
        if run.producer.done.is_set():
            return
        await asyncio.sleep(0.002)


async def _read_back(run: ChaosRun, ids: list[str]) -> dict[str, object]:
    """Each job's hash (None when it is missing), retried while the client reconnects."""
    assert run.client is not None
    keys = QueueKeys(run.queue_name)
    for _ in range(100):
        try:
            recs = await read_jobs(run.client, keys, ids)
        except Exception:
            await asyncio.sleep(0.1)
            continue
        return {j: (r if r.state is not None else None) for j, r in recs.items()}
    raise RuntimeError("the restarted server did not answer the read-back")
