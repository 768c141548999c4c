"""The harvest reads completed jobs while a run goes on, so retention may remove their
hashes (a soak's server memory stays flat) without the verdict losing its evidence; a
harvest that fell behind leaves the removed jobs without a record, so they come out
`lost` (the run fails, never passes by accident). Against a real Valkey."""

from __future__ import annotations

import asyncio
from typing import Any

from glidemq import Queue, Worker
from glidemq.chaos.app import result_digest
from glidemq.chaos.collect import read_jobs
from glidemq.chaos.harvest import Harvest
from glidemq.chaos.ledger import Executions
from glidemq.chaos.outcomes import classify
from glidemq.client.connection import ConnectionOptions, close_client, create_client
from glidemq.keys import QueueKeys
from glidemq.server.valkey import EmbeddedValkey
from tests.helpers import FAST, wait_for

JOBS = 40
KEEP = 5


async def _run(
    valkey_server: EmbeddedValkey, queue_name: str, *, harvesting: bool
) -> tuple[Harvest, Executions, list[str], Any]:
    conn = ConnectionOptions.from_url(valkey_server.url)
    keys = QueueKeys(queue_name)
    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    client = await create_client(conn, name="test-harvest")
    ex = Executions()
    harvest = Harvest(client, keys, every_s=0.05)
    task = asyncio.create_task(harvest.run()) if harvesting else None

    async def process(job: Any) -> dict[str, Any]:
        result = {"id": job.id, "pid": 1, "run": f"1-{job.id}"}
        ex.add_start(job.id, 1.0, 1)
        ex.add_end(job.id, 1.1, 1, result_digest(result))
        await asyncio.sleep(0.02)  # completions spread out, so the harvest keeps up
        return result

    ids = [f"j{i}" for i in range(JOBS)]
    try:
        await queue.add_bulk([("t", {}, {"job_id": j, "remove_on_complete": KEEP}) for j in ids])
        async with Worker(queue_name, process, connection=conn, concurrency=1, **FAST):
            await wait_for(lambda: len(ex.ends) == JOBS, timeout=60)
            await asyncio.sleep(0.3)  # the last completion is written
        if task is not None:
            harvest.stop()
            await task
        else:
            await harvest.once()
        records = await read_jobs(client, keys, ids)
        return harvest, ex, ids, records
    finally:
        await close_client(client)
        await queue.obliterate(force=True)
        await queue.close()


async def test_harvested_records_stand_in_for_removed_hashes(
    valkey_server: EmbeddedValkey, queue_name: str
) -> None:
    harvest, ex, ids, records = await _run(valkey_server, queue_name, harvesting=True)
    # retention kept only the newest KEEP hashes; the harvest read every job before
    assert sum(1 for j in ids if records[j].state is None) == JOBS - KEEP
    assert harvest.gone == 0 and harvest.reads >= JOBS
    assert sorted(harvest.records) == sorted(ids)
    assert all(harvest.records[j].state == "completed" for j in ids)
    for j in ids:
        if records[j].state is None:
            records.put(harvest.records[j])
    out = classify(ids, records, ex, set())
    assert out.counts()["completed_once"] == JOBS, out.failing


async def test_a_harvest_that_fell_behind_makes_the_removed_jobs_lost(
    valkey_server: EmbeddedValkey, queue_name: str
) -> None:
    harvest, ex, ids, records = await _run(valkey_server, queue_name, harvesting=False)
    assert len(harvest.records) == KEEP  # only what retention left
    for j in ids:
        kept = harvest.records.get(j)
        if records[j].state is None and kept is not None:
            records.put(kept)
    out = classify(ids, records, ex, set())
    assert out.counts()["lost"] == JOBS - KEEP
    assert out.counts()["completed_once"] == KEEP


async def test_a_completion_that_reaches_the_server_late_is_still_read(
    valkey_server: EmbeddedValkey, queue_name: str
) -> None:
    # A completion is dated by its worker: one sent before a newer one may be written
    # after it (a batch, a retry after a failover), so it enters the completed set below
    # the newest score the harvest has seen.
    conn = ConnectionOptions.from_url(valkey_server.url)
    keys = QueueKeys(queue_name)
    client = await create_client(conn, name="test-harvest-late")
    try:

        async def complete(job_id: str, at_ms: int) -> None:
            result = {"id": job_id, "pid": 1, "run": "1-1"}
            await client.hset(
                keys.job(job_id),
                {"state": "completed", "finishedOn": str(at_ms), "returnvalue": str(result)},
            )
            await client.zadd(keys.completed, {job_id: float(at_ms)})

        harvest = Harvest(client, keys)
        now = 1_800_000_000_000
        await complete("j1", now)
        await complete("j2", now + 1000)
        assert await harvest.once() == 2
        await complete("j0", now - 2000)  # late: older than what was already read
        assert await harvest.once() == 1
        assert sorted(harvest.records) == ["j0", "j1", "j2"]
        assert await harvest.once() == 0  # nothing read twice
    finally:
        await client.delete([keys.job(f"j{i}") for i in range(3)] + [keys.completed])
        await close_client(client)
