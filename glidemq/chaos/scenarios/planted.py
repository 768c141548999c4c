"""planted: break one job on purpose, behind the queue's back, to prove the verdict sees it.

Not a fault a deployment meets: a self-test of the chaos suite, left out of `all`. Each
`--plant` kind breaks one job in a way the verdict must name, and the run must exit 1:

- `hash-deleted`: a waiting job's hash is deleted -> `lost`;
- `stream-entry-deleted`: a waiting job's stream entry is deleted -> `lost`;
- `completed-twice`: a completed job is sent back and runs and completes again ->
  `completed_twice`;
- `left-active`: a job's processor never returns -> `stuck`;
- `unexplained-failure`: a job fails with a reason no fault explains -> `failed_unexpected`.

None of these is recorded as a fault (a fault would explain it); the result's `planted`
says what was done to which job.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from glide import MaxId, MinId

from ..context import ChaosRun
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["PLANTS", "Planted"]

PLANTS: dict[str, str] = {
    "hash-deleted": "lost",
    "stream-entry-deleted": "lost",
    "completed-twice": "completed_twice",
    "left-active": "stuck",
    "unexplained-failure": "failed_unexpected",
}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@register
class Planted(Scenario):
    name = "planted"
    summary = "self-test: break one job behind the queue's back; the verdict must name it"
    defaults = FleetSettings(procs=1, concurrency=2, job_ms=20.0, faults=0)
    in_all = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--plant", choices=sorted(PLANTS), required=True, help="what to break")

    def job_data(self, run: ChaosRun) -> dict[str, dict[str, object]]:
        victim = f"j{run.jobs // 2}"
        if run.args.plant == "left-active":
            return {victim: {"hang": True}}
        if run.args.plant == "unexplained-failure":
            return {victim: {"fail": "planted failure that no fault explains"}}
        return {}

    async def inject(self, run: ChaosRun) -> None:
        plant = run.args.plant
        victim: str | None = f"j{run.jobs // 2}"
        if plant == "hash-deleted":
            victim = await self._waiting(run)
            if victim is not None:
                assert run.client is not None and run.queue is not None
                await run.client.delete([f"glide:{{{run.queue_name}}}:job:{victim}"])
        elif plant == "stream-entry-deleted":
            victim = await self._delete_newest_entry(run)
        elif plant == "completed-twice":
            victim = "j0"
            await self._completed(run, victim)
            assert run.queue is not None
            job = await run.queue.get_job(victim)
            assert job is not None
            await job.retry("completed")
        run.extra["planted"] = {"kind": plant, "job_id": victim, "expect": PLANTS[plant]}
        run.say(f"planted {plant} on {victim}")

    async def _waiting(self, run: ChaosRun) -> str | None:
        """The newest job still waiting once every job was added."""
        assert run.producer is not None and run.client is not None
        await run.producer.done.wait()
        for i in range(run.jobs - 1, -1, -1):
            state = await run.client.hget(f"glide:{{{run.queue_name}}}:job:j{i}", "state")
            if state is not None and _s(state) == "waiting":
                return f"j{i}"
        return None

    async def _delete_newest_entry(self, run: ChaosRun) -> str | None:
        assert run.producer is not None and run.client is not None
        await run.producer.done.wait()
        key = f"glide:{{{run.queue_name}}}:stream"
        page = await run.client.xrevrange(key, MaxId(), MinId(), 1)
        for entry_id, fields in (page or {}).items():
            job = next((_s(v) for k, v in fields if _s(k) == "id"), None)
            await run.client.xdel(key, [_s(entry_id)])
            return job
        return None

    async def _completed(self, run: ChaosRun, job_id: str, timeout: float = 60.0) -> None:
        assert run.client is not None
        deadline = time.monotonic() + timeout
        key = f"glide:{{{run.queue_name}}}:job:{job_id}"
        while time.monotonic() < deadline:
            state = await run.client.hget(key, "state")
            if state is not None and _s(state) == "completed":
                return
            await asyncio.sleep(0.02)
