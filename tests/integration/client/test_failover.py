"""A Worker processing a stream of jobs through server faults: SIGKILL of the cluster primary
that owns the queue's slot, a graceful CLUSTER FAILOVER, and a standalone server killed and
restarted (with an append-only file). Processing resumes within the promised bound, the worker
recovers by itself, and no job is lost (every job ends completed; running one twice is
allowed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from glide import SlotKeyRoute, SlotType

import glidemq
from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.server.cluster import EmbeddedCluster
from glidemq.server.valkey import EmbeddedValkey
from tests.helpers import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOTAL = 600
BATCH = 20
RESUME_SLACK = 5.0  # the promise: resumed within cluster-node-timeout + 5 s
WORKER = {
    "concurrency": 8,
    "block_timeout": 500,
    "lock_duration": 3000,
    "stalled_interval": 1000,
    "max_stalled_count": 100,  # a job may stall more than once while nodes change roles
    "promotion_interval": 100,
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    """A cluster of this module alone: its nodes are killed and failed over."""
    with EmbeddedCluster() as c:
        yield c


class Run:
    """A producer trickling TOTAL jobs with custom ids into the queue while a Worker runs
    them; it records when each completion was acknowledged by the server."""

    def __init__(self, queue: Queue[Any, Any], cluster: bool) -> None:
        self.queue = queue
        self.cluster = cluster
        self.confirmed: set[str] = set()
        self.ran: dict[str, int] = {}
        self.completed_at: list[float] = []

    async def process(self, job: Job[Any, Any]) -> Any:
        self.ran[job.id] = self.ran.get(job.id, 0) + 1
        await asyncio.sleep(0.002)
        return job.data

    def completed(self, job: Job[Any, Any], result: Any) -> None:
        self.completed_at.append(time.monotonic())

    async def produce(self) -> None:
        """Add in batches; a batch counts once the server confirmed it and (in a cluster) a
        replica has it, so a crash of the primary cannot take it along. Unconfirmed batches
        are sent again: custom ids make that harmless."""
        for start in range(0, TOTAL, BATCH):
            ids = [f"j{i}" for i in range(start, start + BATCH)]
            while True:
                try:
                    await self.queue.add_bulk([("n", i, {"job_id": i}) for i in ids])
                    if await self.replicated():
                        break
                except glidemq.GlideMQError:
                    pass
                await asyncio.sleep(0.2)
            self.confirmed.update(ids)
            await asyncio.sleep(0.03)

    async def replicated(self) -> bool:
        """Whether the slot's primary has passed the writes on to its replica (trivially
        true for a primary that has none left, e.g. after its replica was promoted)."""
        if not self.cluster:
            return True
        ctx = await self.queue._context()
        route = SlotKeyRoute(SlotType.PRIMARY, self.queue.keys.stream)
        client: Any = ctx.client
        try:
            acked = int(await client.custom_command(["WAIT", "1", "500"], route))
            if acked >= 1:
                return True
            info = await client.custom_command(["INFO", "replication"], route)
        except Exception:
            return False
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "connected_slaves:0" in text

    def resumed_after(self, fault_at: float) -> float | None:
        """Seconds from the fault to the first completion acknowledged after it."""
        later = [t for t in self.completed_at if t > fault_at]
        return later[0] - fault_at if later else None

    async def all_completed(self) -> bool:
        counts = await self.queue.get_job_counts()
        return counts.completed == TOTAL


async def run_through_fault(
    conn: ConnectionOptions, name: str, cluster: bool, fault: Any, resume_bound: float
) -> Run:
    async with Queue(name, connection=conn) as queue:
        run = Run(queue, cluster)
        worker: Worker[Any, Any] = Worker(name, run.process, connection=conn, **WORKER)
        worker.on("completed", run.completed)
        async with worker:
            producer = asyncio.create_task(run.produce())
            await wait_for(lambda: len(run.completed_at) >= TOTAL // 4, timeout=30)
            fault_at = time.monotonic()
            await fault()
            await wait_for(lambda: run.resumed_after(fault_at) is not None, timeout=60)
            resumed = run.resumed_after(fault_at)
            assert resumed is not None and resumed < resume_bound, resumed
            await asyncio.wait_for(producer, 60)
            await wait_for(run.all_completed, timeout=30, interval=0.2)
            assert worker.is_running()
            assert not any(t.done() for t in worker._tasks), "a worker loop died"
        # No job lost: every confirmed job ran and ended completed.
        assert run.confirmed == {f"j{i}" for i in range(TOTAL)}
        assert set(run.ran) == run.confirmed
        for job in await queue.get_jobs("completed", 0, -1):
            assert job.state == "completed"
        await queue.obliterate(force=True)
    return run


def cluster_conn(cluster: EmbeddedCluster) -> ConnectionOptions:
    return ConnectionOptions(addresses=tuple(cluster.addresses), cluster=True)


@pytest.mark.timeout(180)
async def test_sigkill_of_the_slot_primary_resumes_within_node_timeout(
    cluster: EmbeddedCluster, queue_name: str
) -> None:
    await asyncio.to_thread(cluster.wait_healthy, 60)
    stream = f"glide:{{{queue_name}}}:stream"
    victim = cluster.primary_for_key(stream)
    bound = cluster.node_timeout_ms / 1000 + RESUME_SLACK

    async def kill() -> None:
        cluster.kill_node(victim)

    try:
        await run_through_fault(cluster_conn(cluster), queue_name, True, kill, bound)
        assert cluster.primary_for_key(stream) is not victim
    finally:
        await asyncio.to_thread(cluster.restart_node, victim)
        await asyncio.to_thread(cluster.wait_healthy, 60)


@pytest.mark.timeout(180)
async def test_graceful_cluster_failover_resumes_within_node_timeout(
    cluster: EmbeddedCluster, queue_name: str
) -> None:
    await asyncio.to_thread(cluster.wait_healthy, 60)
    stream = f"glide:{{{queue_name}}}:stream"
    primary = cluster.primary_for_key(stream)
    replica = cluster.replica_of(primary)
    bound = cluster.node_timeout_ms / 1000 + RESUME_SLACK

    async def failover() -> None:
        await asyncio.to_thread(cluster.failover, replica)

    await run_through_fault(cluster_conn(cluster), queue_name, True, failover, bound)
    assert cluster.primary_for_key(stream) is replica


@pytest.mark.timeout(120)
async def test_standalone_sigkill_and_restart_with_aof(queue_name: str) -> None:
    # fsync on every write: a SIGKILL then loses no acknowledged add
    with EmbeddedValkey(appendonly=True, appendfsync="always") as server:
        conn = ConnectionOptions.from_url(server.url, request_timeout_ms=1000)
        down = 1.0

        async def crash_and_restart() -> None:
            server.kill()
            await asyncio.sleep(down)
            await asyncio.to_thread(server.start)

        # glide reconnects with backoff; the worker needs no help from the test
        await run_through_fault(conn, queue_name, False, crash_and_restart, down + RESUME_SLACK)
        library = server.execute("FUNCTION", "LIST", "LIBRARYNAME", "glidemq")
        assert library, "the library came back from the append-only file"
