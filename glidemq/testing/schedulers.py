"""Job schedulers of the in-memory engine: stored per queue, fired by running TestWorkers on
the queue's clock.

Validation, placing in time and planning the next run are the real engine's
(glidemq.scheduler: build, place, plan_fire); only the storage differs. As on the server,
each run adds exactly one job (id `repeat-<name>-<run time>`), runs missed while no worker
ran are not made up, and a scheduler that reached its limit or end date removes itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from .. import scheduler
from ..errors import GlideMQError
from ..scheduler import JobScheduler, JobTemplate
from ..serialize import encode_data
from .records import FINISHED
from .store import QueueStore
from .support import check_options

__all__ = ["SchedulerMethods", "fire_due"]


def fire_due(store: QueueStore, now: int, on_error: Callable[[BaseException], None]) -> int:
    """Fire every due scheduler of `store` once; returns how many jobs were added."""
    added = 0
    for name, s in sorted(store.schedulers.items()):
        if s.awaiting is not None:
            rec = store.jobs.get(s.awaiting)
            if rec is not None and rec.state not in FINISHED:
                continue  # repeat_after_complete: its last job still runs
            finished_on = now if rec is None or rec.finished_on is None else rec.finished_on
            after = scheduler.plan_after(s, finished_on)
            if after is None:
                del store.schedulers[name]
                continue
            store.schedulers[name] = s = after
        if s.next_run > now:
            continue
        try:
            entry, nxt = scheduler.plan_fire(s, now)
            data = encode_data(s.template.data, compress=s.compress)
        except GlideMQError as exc:  # a template that no longer encodes
            on_error(exc)
            continue
        # jobs of schedulers are never refused by max_waiting, as on the server
        job_id = store.add(
            s.template.name or s.name, data, s.template.opts, now, custom_id=s.job_id(s.next_run)
        )
        added += job_id != "duplicate"
        if s.repeat_after_complete and entry:
            store.schedulers[name] = dataclasses.replace(
                s, last_run=s.next_run, count=s.count + 1, awaiting=s.job_id(s.next_run)
            )
        elif nxt is None:
            del store.schedulers[name]
        else:
            store.schedulers[name] = dataclasses.replace(
                s, next_run=nxt, last_run=s.next_run, count=s.count + 1
            )
    return added


class SchedulerMethods:
    """The job scheduler methods of TestQueue (the same as Queue's)."""

    compression: bool

    async def _ready(self) -> QueueStore:
        raise NotImplementedError

    async def upsert_job_scheduler(
        self,
        name: str,
        *,
        cron: str | None = None,
        every_ms: int | None = None,
        tz: str | None = None,
        start_date: int | datetime | None = None,
        end_date: int | datetime | None = None,
        limit: int | None = None,
        template: JobTemplate | Mapping[str, Any] | None = None,
        repeat_after_complete: bool = False,
    ) -> JobScheduler:
        """Create or replace the scheduler `name`: running workers add a job from `template`
        (name, data, opts) on the `cron` expression (in time zone `tz`) or every `every_ms`,
        from `start_date` until `end_date` or `limit` jobs. Replacing it keeps its next run
        when the schedule is unchanged. With `repeat_after_complete` the next run is planned
        when the previous run's job finished, so runs never overlap. Returns the stored
        scheduler."""
        new = scheduler.build(
            name,
            cron=cron,
            every_ms=every_ms,
            tz=tz,
            start_date=start_date,
            end_date=end_date,
            limit=limit,
            template=template,
            compress=self.compression,
            repeat_after_complete=repeat_after_complete,
        )
        check_options(new.template.opts)  # what the in-memory engine cannot run is refused
        store = await self._ready()
        placed = scheduler.place(new, store.schedulers.get(name), store.clock.now_ms())
        store.schedulers[name] = placed
        store.notify()
        return placed

    async def get_job_scheduler(self, name: str) -> JobScheduler | None:
        """The scheduler `name`, or None."""
        return (await self._ready()).schedulers.get(name)

    async def get_job_schedulers(self) -> list[JobScheduler]:
        """Every scheduler of the queue, the next to run first."""
        found = (await self._ready()).schedulers.values()
        return sorted(found, key=lambda s: (s.next_run, s.name))

    async def remove_job_scheduler(self, name: str) -> bool:
        """Delete the scheduler `name` (jobs it already added stay); False if there was none."""
        return (await self._ready()).schedulers.pop(name, None) is not None
