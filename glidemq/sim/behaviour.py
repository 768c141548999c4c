"""What the simulated workers run: the seed's processor, or a user's (`--app`), inside the
wrapper that records every run for the checker.

The seed's processor reads what to do from the job's data (glidemq.sim.plan.JobSpec.run):
work for `d` ms of virtual time, fail its first `f` tries, crash its own worker process, block
its worker's loop on its first run, report progress, or suspend on its first try. It returns
the run's token, so the checker knows which run's completion the server accepted.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..job.job import Job
from .loop import Process, current_process

__all__ = ["PlannedFailure", "Recorder", "Slot", "UserProcessor", "make_processor"]

UserProcessor = Callable[[Job[Any, Any]], Any]


class Slot(Protocol):
    """The worker place a processor runs in (glidemq.sim.world.WorkerSlot)."""

    process: Process


class Recorder(Protocol):
    """What the processor tells the world (glidemq.sim.world.World)."""

    def run_started(self, slot: Any, job: Job[Any, Any]) -> int: ...

    def run_ended(self, slot: Any, job: Job[Any, Any], token: int, outcome: str) -> None: ...

    def crash(self, slot: Any, why: str) -> None: ...

    def block(self, slot: Any, job: Job[Any, Any], seconds: float) -> bool: ...


class PlannedFailure(Exception):
    """The failure a job's data asked for."""


async def _planned(world: Recorder, slot: Slot, job: Job[Any, Any], token: int) -> Any:
    data = job.data if isinstance(job.data, dict) else {}
    if data.get("x"):
        world.crash(slot, "its job crashed it")
        await asyncio.get_running_loop().create_future()  # the process is gone: never resumes
    if data.get("b") and world.block(slot, job, int(data["b"]) / 1000):
        await asyncio.sleep(0)  # runs again once the loop is free: nothing ran meanwhile
    if data.get("s") and not job.signals:
        await job.suspend("waiting for a signal")
    if data.get("p"):
        await job.update_progress(50)
    await asyncio.sleep(int(data.get("d", 1)) / 1000)
    if job.attempts_made < int(data.get("f", 0)):
        raise PlannedFailure(f"planned failure of try {job.attempts_made + 1}")
    return {"run": token}


async def _user(app: UserProcessor, job: Job[Any, Any]) -> Any:
    result = app(job)
    if inspect.isawaitable(result):
        result = await result
    return result


def make_processor(
    world: Recorder, slot: Slot, app: UserProcessor | None
) -> Callable[[Job[Any, Any]], Awaitable[Any]]:
    """The processor of one worker: records the start, runs, records the end."""

    async def processor(job: Job[Any, Any]) -> Any:
        token = world.run_started(slot, job)
        outcome = "ok"
        try:
            if app is None:
                return await _planned(world, slot, job, token)
            return await _user(app, job)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except BaseException as exc:
            outcome = type(exc).__name__
            raise
        finally:
            if current_process() is slot.process and slot.process.alive:
                world.run_ended(slot, job, token, outcome)

    return processor
