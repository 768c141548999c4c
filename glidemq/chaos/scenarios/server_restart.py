"""server-restart: SIGKILL the Valkey server mid-run and start it again from its AOF.

The server runs with `appendonly yes` and `appendfsync everysec`. A SIGKILL loses nothing
that was written to the AOF file (the kernel keeps it); workers and the producer see
connection errors, reconnect, and carry on. Jobs whose completion did not reach the server
come back through stall recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time

from ..context import ChaosRun
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["ServerRestart"]


@register
class ServerRestart(Scenario):
    name = "server-restart"
    summary = "SIGKILL the Valkey server (AOF everysec) mid-run and restart it"
    server = "aof"
    controls_server = True
    defaults = FleetSettings(procs=2, concurrency=8, job_ms=20.0, faults=1, rate=400.0)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--down",
            type=float,
            default=1.0,
            metavar="SECONDS",
            help="how long the server stays dead before the restart (default 1)",
        )

    async def inject(self, run: ChaosRun) -> None:
        server = run.target.standalone
        assert server is not None
        restarts: list[float] = []
        for point in run.fault_points(run.settings.faults, 0.2, 0.6):
            await run.wait_progress(point)
            pid = server.pid
            server.kill(signal.SIGKILL)
            fault = run.fault("sigkill-server", pid, hits_all=True, down_s=run.args.down)
            await asyncio.sleep(run.args.down)
            began = time.monotonic()
            await asyncio.to_thread(server.start, 30.0)
            fault.ended = time.time()
            restarts.append(round(time.monotonic() - began, 3))
            run.say(f"server back (pid {server.pid}) after {time.monotonic() - began:.2f} s")
        run.extra["server_start_s"] = restarts
