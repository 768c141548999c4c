"""Reading completed jobs while the run goes on, before the queue's retention removes them.

A soak of a million jobs cannot keep every job hash on the server (its memory must stay
flat), so its jobs are added with `remove_on_complete=N`: the queue keeps the newest N
completed jobs. The verdict still needs each job's final state, so `Harvest` follows the
completed set (by completion time, each round from a little before the newest it saw)
and reads each newly completed hash, well before N newer completions push it out. At the
end the records of jobs whose hash is gone are taken from the harvest; a job whose hash
is gone and that was never harvested has no record, and is `lost` (so a harvest that
falls behind fails the run, it never passes it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from glide import InfBound, Limit, RangeByScore, ScoreBoundary

from ..client.connection import Client
from ..keys import QueueKeys
from .collect import JobRecords, read_jobs

__all__ = ["LOOKBACK_MS", "Harvest"]

_PAGE = 2000
# A completion is dated by the worker that sent it, and may reach the server late (a
# batch, a retry after a failover): newer ones may already be in the set. Each round
# reads again this far back before the newest completion seen, skipping jobs it has.
LOOKBACK_MS = 30_000.0


@dataclass
class Harvest:
    """Follows the completed set of `keys`' queue and keeps the record of every job in
    it (`records`, the first time it is seen completed; a later completion of the same
    job is judged by the verdict from the execution ledger); `gone` counts members whose
    hash was already removed when read."""

    client: Client
    keys: QueueKeys
    every_s: float = 2.0
    records: JobRecords = field(default_factory=JobRecords)
    reads: int = 0
    gone: int = 0
    errors: int = 0
    _score: float = 0.0  # the newest completion time (ms) seen in the set
    _stop: bool = False

    async def once(self) -> int:
        """Read the jobs that entered the completed set since `LOOKBACK_MS` before the
        newest one seen last time (a page at a time); returns how many were read."""
        total = 0
        offset = 0
        low = max(0.0, self._score - LOOKBACK_MS)
        while True:
            page = await self.client.zrange_withscores(
                self.keys.completed,
                RangeByScore(
                    ScoreBoundary(low, is_inclusive=True), InfBound.POS_INF, Limit(offset, _PAGE)
                ),
            )
            offset += len(page)
            fresh: list[str] = []
            for member, score in page.items():
                job_id = member.decode() if isinstance(member, bytes) else str(member)
                self._score = max(self._score, score)
                if job_id not in self.records:
                    fresh.append(job_id)
            if fresh:
                got = await read_jobs(self.client, self.keys, fresh)
                for job_id in fresh:
                    rec = got[job_id]
                    if rec.state is None:
                        self.gone += 1  # removed before it was read: no evidence kept
                    else:
                        self.records.put(rec)
                self.reads += len(fresh)
                total += len(fresh)
            if len(page) < _PAGE:
                return total

    async def run(self) -> None:
        """Harvest every `every_s` seconds until `stop()`; survives server outages."""
        while not self._stop:
            try:
                await self.once()
            except Exception:  # a failover or a frozen node: read again later
                self.errors += 1
            await asyncio.sleep(self.every_s)
        try:
            await self.once()  # what completed since the last round
        except Exception:
            self.errors += 1

    def stop(self) -> None:
        self._stop = True
