"""Durability against real servers: the wait reaches the node that took the write (counted
in INFO commandstats), one wait per call or pipeline, none after reads; a replica that does
not confirm in time gives a DurabilityTimeoutError naming the job (never a silent
success); WAITAOF on a standalone server with and without an AOF."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    Durability,
    DurabilityError,
    DurabilityTimeoutError,
    FlowJob,
    FlowProducer,
    GlideMQError,
    Job,
    Queue,
    Worker,
)
from glidemq.server.cluster import EmbeddedCluster
from glidemq.server.valkey import EmbeddedValkey
from tests.helpers import FAST, job_state, wait_for


def _calls(node: EmbeddedValkey, command: str) -> int:
    """How many times `node` ran `command` (INFO commandstats)."""
    for line in str(node.execute("INFO", "commandstats")).splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def _waits(cluster: EmbeddedCluster) -> dict[int, int]:
    return {n.port: _calls(n, "wait") for n in cluster.nodes if n.running}


def _primary(cluster: EmbeddedCluster, queue: str) -> EmbeddedValkey:
    return cluster.primary_for_key(f"glide:{{{queue}}}:meta")


@contextlib.contextmanager
def _paused(node: EmbeddedValkey) -> Iterator[None]:
    """The node frozen (SIGSTOP) for a moment shorter than the cluster's node timeout, so
    nothing fails over; always resumed."""
    assert node.pid is not None
    os.kill(node.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(node.pid, signal.SIGCONT)


def _cluster_conn(cluster: EmbeddedCluster, **kw: Any) -> ConnectionOptions:
    return ConnectionOptions(addresses=tuple(cluster.addresses), cluster=True, **kw)


async def _noop(job: Job[Any, Any]) -> str:
    return "ok"


@pytest.mark.cluster
async def test_each_write_waits_once_on_the_primary_that_took_it(
    valkey_cluster: EmbeddedCluster, queue_name: str
) -> None:
    conn = _cluster_conn(valkey_cluster, durability="replicated")
    primary = _primary(valkey_cluster, queue_name)
    async with Queue(queue_name, connection=conn) as q:
        before = _waits(valkey_cluster)
        job = await q.add("one", {"n": 1})
        assert job is not None
        after = _waits(valkey_cluster)
        grew = {port: after[port] - before[port] for port in after}
        assert grew == {port: (1 if port == primary.port else 0) for port in after}

        # 50 callers at once: their adds share calls, and each call waits once
        waits = _calls(primary, "wait")
        await asyncio.gather(*(q.add("many", {"i": i}) for i in range(50)))
        assert 1 <= _calls(primary, "wait") - waits <= 3

        # 2,000 jobs: 8 bulk calls in one pipeline, one wait behind them all
        fcalls, waits = _calls(primary, "fcall"), _calls(primary, "wait")
        added = await q.add_bulk([("bulk", {"i": i}) for i in range(2000)])
        assert len(added) == 2000
        assert _calls(primary, "fcall") - fcalls == 8
        assert _calls(primary, "wait") - waits == 1

        # a queue setting (plain commands) waits once too
        waits = _calls(primary, "wait")
        await q.set_global_concurrency(5)
        await q.set_max_waiting(None)
        assert _calls(primary, "wait") - waits == 2

        # reads change nothing: no wait
        waits = _calls(primary, "wait")
        counts = await q.get_job_counts()
        assert counts.waiting == 2051
        assert _calls(primary, "wait") == waits
        await q.obliterate(force=True)


@pytest.mark.cluster
async def test_without_the_option_nothing_waits(
    valkey_cluster: EmbeddedCluster, queue_name: str
) -> None:
    primary = _primary(valkey_cluster, queue_name)
    async with Queue(queue_name, connection=_cluster_conn(valkey_cluster)) as q:
        waits = _calls(primary, "wait")
        await q.add("one", {})
        await q.add_bulk([("bulk", {}) for _ in range(300)])
        assert _calls(primary, "wait") == waits
        await q.obliterate(force=True)


@pytest.mark.cluster
async def test_a_busy_worker_pays_a_wait_per_batch_not_per_job(
    valkey_cluster: EmbeddedCluster, queue_name: str
) -> None:
    jobs = 1000
    primary = _primary(valkey_cluster, queue_name)
    async with Queue(queue_name, connection=_cluster_conn(valkey_cluster)) as q:
        await q.add_bulk([("n", {"i": i}) for i in range(jobs)])
        waits = _calls(primary, "wait")
        worker: Worker[Any, Any] = Worker(
            queue_name,
            _noop,
            connection=_cluster_conn(valkey_cluster, durability="replicated"),
            concurrency=50,
            **FAST,
        )
        async with worker:
            await wait_for(lambda: worker.completed_count == jobs, timeout=60)
        paid = _calls(primary, "wait") - waits
        assert 0 < paid <= jobs // 5, f"{paid} waits for {jobs} jobs"
        assert (await q.get_job_counts()).completed == jobs
        await q.obliterate(force=True)


@pytest.mark.cluster
async def test_an_add_the_replica_does_not_confirm_raises_naming_the_job(
    valkey_cluster: EmbeddedCluster, queue_name: str
) -> None:
    conn = _cluster_conn(valkey_cluster, durability="replicated", durability_timeout_ms=300)
    primary = _primary(valkey_cluster, queue_name)
    replica = valkey_cluster.replica_of(primary)
    async with Queue(queue_name, connection=conn) as q:
        await q.add("warm", {})  # connected, library loaded, confirmed
        with _paused(replica):
            with pytest.raises(DurabilityTimeoutError) as err:
                await q.add("order", {"n": 1}, {"job_id": "order-1"})
            with pytest.raises(DurabilityTimeoutError) as bulk_err:
                await q.add_bulk([("b", {}, {"job_id": f"b-{i}"}) for i in range(3)])
            with pytest.raises(DurabilityTimeoutError):
                await q.set_max_waiting(100)
            job = await q.get_job("order-1")  # a read: no wait
            assert job is not None
            with pytest.raises(DurabilityTimeoutError) as job_err:
                await job.update_progress(50)
        assert err.value.job_ids == ["order-1"]
        assert err.value.timeout_ms == 300
        assert "may or may not survive" in str(err.value)
        assert bulk_err.value.job_ids == ["b-0", "b-1", "b-2"]
        assert job_err.value.job_ids == ["order-1"]
        # the write ran on the primary: it is there
        assert await job_state(q, "order-1") == "waiting"
        # the safe retry: the same id, now confirmed, adds nothing twice
        assert await q.add("order", {"n": 1}, {"job_id": "order-1"}) is None
        assert (await q.get_job_counts()).waiting == 5
        await q.obliterate(force=True)


@pytest.mark.cluster
async def test_a_flow_the_replica_does_not_confirm_names_its_jobs(
    valkey_cluster: EmbeddedCluster, queue_name: str
) -> None:
    conn = _cluster_conn(valkey_cluster, durability="replicated", durability_timeout_ms=300)
    replica = valkey_cluster.replica_of(_primary(valkey_cluster, queue_name))
    flows = FlowProducer(connection=conn)
    try:
        child = FlowJob("child", queue_name, {}, {"job_id": "c1"})
        await flows.add(FlowJob("warm", queue_name, {}))
        with _paused(replica), pytest.raises(DurabilityTimeoutError) as err:
            await flows.add(FlowJob("parent", queue_name, {}, {"job_id": "p1"}, [child]))
        assert sorted(err.value.job_ids) == ["c1", "p1"]
    finally:
        await flows.close()
    async with Queue(queue_name, connection=_cluster_conn(valkey_cluster)) as q:
        await q.obliterate(force=True)


@pytest.mark.cluster
async def test_a_completion_the_replica_does_not_confirm_is_an_error_not_a_success(
    valkey_cluster: EmbeddedCluster, queue_name: str
) -> None:
    primary = _primary(valkey_cluster, queue_name)
    replica = valkey_cluster.replica_of(primary)
    durable = _cluster_conn(valkey_cluster, durability="replicated", durability_timeout_ms=300)
    async with Queue(queue_name, connection=_cluster_conn(valkey_cluster)) as q:
        worker: Worker[Any, Any] = Worker(queue_name, _noop, connection=durable, **FAST)
        completed: list[str] = []
        errors: list[BaseException] = []
        worker.on("completed", lambda job, rv: completed.append(job.id))
        worker.on("error", errors.append)
        async with worker:
            await q.add("first", {}, {"job_id": "first"})
            await wait_for(lambda: completed == ["first"])
            with _paused(replica):
                await q.add("late", {}, {"job_id": "late"})
                await wait_for(
                    lambda: any(
                        isinstance(e, DurabilityError) and e.job_ids == ["late"] for e in errors
                    ),
                    timeout=5,
                )
            # stored on the primary, but the worker never called it completed
            assert completed == ["first"]
            assert await job_state(q, "late") == "completed"
        await q.obliterate(force=True)


# =========================================================================== standalone


@pytest.fixture
def aof_server() -> Iterator[EmbeddedValkey]:
    """A standalone Valkey with an append-only file, of this test alone."""
    server = EmbeddedValkey(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


async def test_fsync_waits_for_the_aof_once_per_write(aof_server: EmbeddedValkey) -> None:
    conn = ConnectionOptions.from_url(aof_server.url, durability="fsync")
    async with Queue("fsync", connection=conn) as q:
        before = _calls(aof_server, "waitaof")
        await q.add("one", {})
        await q.add_bulk([("b", {}) for _ in range(600)])
        assert _calls(aof_server, "waitaof") - before == 2
        assert (await q.get_job_counts()).waiting == 601


async def test_fsync_without_an_aof_says_the_write_was_not_confirmed(
    valkey_server: Any, queue_name: str
) -> None:
    conn = ConnectionOptions.from_url(valkey_server.url, durability="fsync")
    async with Queue(queue_name, connection=conn) as q:
        with pytest.raises(DurabilityError) as err:
            await q.add("x", {}, {"job_id": "x1"})
        assert "WAITAOF" in str(err.value) and err.value.job_ids == ["x1"]
        assert await job_state(q, "x1") == "waiting"  # written, not confirmed
    async with Queue(queue_name, connection=valkey_server.url) as plain:
        await plain.obliterate(force=True)


async def test_replicated_on_a_server_without_replicas_times_out(
    valkey_server: Any, queue_name: str
) -> None:
    conn = ConnectionOptions.from_url(
        valkey_server.url, durability="replicated", durability_timeout_ms=100
    )
    async with Queue(queue_name, connection=conn) as q:
        with pytest.raises(DurabilityTimeoutError) as err:
            await q.add("x", {})
        assert isinstance(err.value, GlideMQError) and len(err.value.job_ids) == 1
        plain = Queue(queue_name, connection=valkey_server.url)
        async with plain:
            await plain.obliterate(force=True)


async def test_a_wait_longer_than_the_request_timeout_is_not_cut_off(
    valkey_server: Any, queue_name: str
) -> None:
    # the pipeline gets the wait's time on top of the request timeout (FACTS.md: a 250 ms
    # client timeout would otherwise cut a 600 ms WAIT and report a transport failure)
    conn = ConnectionOptions.from_url(
        valkey_server.url,
        request_timeout_ms=250,
        durability="replicated",
        durability_timeout_ms=600,
    )
    async with Queue(queue_name, connection=conn) as q:
        with pytest.raises(DurabilityTimeoutError) as err:  # not a ConnectionError
            await q.add("x", {})
        assert err.value.timeout_ms == 600
    async with Queue(queue_name, connection=valkey_server.url) as plain:
        await plain.obliterate(force=True)


def test_the_sync_api_waits_too(valkey_server: Any, queue_name: str) -> None:
    # the sync add's direct path (its own blocking client) steps aside: the wait goes with
    # the async path, so a server without replicas never confirms
    from glidemq import sync

    durable = Durability("replicated", replicas=1, timeout_ms=100)
    with sync.Queue(queue_name, connection=valkey_server.url, durability=durable) as q:
        assert q.connection.confirmation == durable
        q.get_job_counts()  # connected: a plain add could now take the direct path
        with pytest.raises(DurabilityTimeoutError) as err:
            q.add("x", {}, {"job_id": "s1"})
        assert err.value.job_ids == ["s1"]
    with sync.Queue(queue_name, connection=valkey_server.url) as plain:
        assert plain.get_job("s1") is not None
        plain.obliterate(force=True)
