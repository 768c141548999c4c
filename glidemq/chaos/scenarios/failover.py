"""failover: take away the cluster primary that owns the queue's slot while jobs flow.

The run starts a 3-primary, 3-replica cluster. At each fault point the primary serving the
queue's hash slot is SIGKILLed (or, with `--graceful`, its replica takes over with
`CLUSTER FAILOVER`). The replica is promoted (after about `cluster-node-timeout` for a
kill), the workers' and the producer's clients follow the new slot map by themselves, and
the killed node is started again so it rejoins as a replica before the next fault.

Measured per fault: `promoted_s` (fault to the new primary serving the slot) and
`resumed_s` (fault to the first job the server completed after it, dated by the id of the
job's `completed` event; for `--graceful`, the first after the promotion). The run
fails when processing did not resume within `cluster-node-timeout + 5 s`. Writes a primary
acknowledged just before it died and had not passed on to its replica yet are lost with it
(Valkey replication is asynchronous); on one machine that window is below a millisecond.

`--replication-lag MS` makes that window MS wide: the replica of the queue's primary
reaches it through a delaying proxy (`glidemq.chaos.replication`), and the kill drops what
the proxy still holds. Without `--durability replicated` the run then loses acknowledged
adds and reruns acknowledged completions (the verdict counts both); with it, neither.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from functools import partial
from typing import Any

from glide import ExclusiveIdBound, IdBound, MaxId

from ...cli.argtypes import non_negative_float
from ...client.context import QueueContext
from ...errors import GlideMQError
from ...keys import QueueKeys
from ...server.cluster import EmbeddedCluster
from ...server.valkey import EmbeddedValkey
from ..context import ChaosRun
from ..registry import register
from ..replication import ReplicationLag
from ..scenario import FleetSettings, Scenario

__all__ = ["Failover"]

RESUME_SLACK_S = 5.0  # the promise: processing resumes within cluster-node-timeout + this
_PROMOTION_TIMEOUT_S = 60.0


def _slot_key(run: ChaosRun) -> str:
    return f"glide:{{{run.queue_name}}}:stream"


async def _page(key: str, start: IdBound | ExclusiveIdBound, client: Any) -> Any:
    return await client.xrange(key, start, MaxId(), 200)


async def _resumed(run: ChaosRun, after: float, timeout: float) -> float | None:
    """Epoch seconds of the first job the server completed after `after` (epoch seconds),
    from the id of its `completed` event: ids carry the executing server's clock, so a
    completion that waited in a client's retries is dated when it really happened."""
    assert run.client is not None
    # the run's own direct client, with the retries a queue's calls have
    ctx = QueueContext(run.client, QueueKeys(run.queue_name))
    key = ctx.keys.events
    start: IdBound | ExclusiveIdBound = IdBound(f"{int(after * 1000) + 1}-0")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            page: Any = await ctx.command(partial(_page, key, start))
        except GlideMQError:  # the slot may still be moving: read again
            page = None
        for entry_id, fields in (page or {}).items():
            start = ExclusiveIdBound(entry_id)
            if any(k == b"event" and v == b"completed" for k, v in fields):
                return int(entry_id.split(b"-")[0]) / 1000
        if not page:
            await asyncio.sleep(0.05)
    return None


@register
class Failover(Scenario):
    name = "failover"
    summary = "SIGKILL (or --graceful CLUSTER FAILOVER) the cluster primary of the queue's slot"
    server = "cluster"
    controls_server = True
    defaults = FleetSettings(procs=2, concurrency=8, job_ms=20.0, faults=1, rate=300.0)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--graceful",
            action="store_true",
            help="promote the replica with CLUSTER FAILOVER instead of killing the primary",
        )
        parser.add_argument(
            "--replication-lag",
            type=non_negative_float,
            default=0.0,
            metavar="MS",
            help="delay the replication stream from the queue's primary to its replica by MS "
            "(the kill loses what the replica had not received)",
        )

    def __init__(self) -> None:
        self.down: list[EmbeddedValkey] = []
        self.lags: list[ReplicationLag] = []

    async def _lag(self, run: ChaosRun, primary: EmbeddedValkey) -> ReplicationLag | None:
        """The lag on `primary`'s replication link, put in place when asked for."""
        ms = float(getattr(run.args, "replication_lag", 0.0) or 0.0)
        if ms <= 0:
            return None
        for lag in self.lags:
            if lag.primary is primary:
                return lag
        cluster = run.target.cluster
        assert cluster is not None
        lag = ReplicationLag(cluster, primary, ms)
        self.lags.append(lag)
        await asyncio.to_thread(lag.start)
        run.say(
            f"replication of primary {primary.port} to {lag.replica.port if lag.replica else '?'}"
            f" lags {ms:g} ms"
        )
        return lag

    async def prepare(self, run: ChaosRun) -> None:
        cluster = run.target.cluster
        assert cluster is not None
        await asyncio.to_thread(cluster.wait_healthy, 60.0)
        await self._lag(run, cluster.primary_for_key(_slot_key(run)))

    async def inject(self, run: ChaosRun) -> None:
        cluster = run.target.cluster
        assert cluster is not None
        graceful = bool(run.args.graceful)
        durable = getattr(run.args, "durability", None) not in (None, "none")
        bound = cluster.node_timeout_ms / 1000 + RESUME_SLACK_S
        report: list[dict[str, Any]] = []
        for point in run.fault_points(run.settings.faults, 0.25, 0.6):
            await run.wait_progress(point)
            await asyncio.to_thread(cluster.wait_healthy, 60.0)
            primary = cluster.primary_for_key(_slot_key(run))
            lag = await self._lag(run, primary)
            began = time.monotonic()
            if graceful:
                replica = cluster.replica_of(primary)
                fault = run.fault("cluster-failover", replica.pid, hits_all=True, node=replica.port)
                switch = asyncio.create_task(
                    asyncio.to_thread(cluster.failover, replica, False, _PROMOTION_TIMEOUT_S)
                )
                await self._wait_promoted(cluster, run, primary)
                promoted = time.monotonic() - began
                # the old primary completes jobs until the switch: count from the promotion
                after = time.time()
                await switch  # and the cluster agrees on it everywhere
            else:
                pid = primary.pid
                if lag is not None:
                    lag.cut()  # what the replica has not received dies with the primary
                cluster.kill_node(primary)
                self.down.append(primary)
                fault = run.fault("sigkill-primary", pid, hits_all=True, node=primary.port)
                after = fault.at  # nothing completes while the slot has no primary
                await self._wait_promoted(cluster, run, primary)
                promoted = time.monotonic() - began
                if durable:
                    # durability acknowledges nothing while the shard has no replica: its
                    # old primary comes back as one now, not after the measurement
                    await asyncio.to_thread(self._restart_down, cluster)
            fault.ended = time.time()
            first = await _resumed(run, after, 3 * bound)
            resumed = None if first is None else round(first - fault.at, 3)
            fault.detail.update(promoted_s=round(promoted, 3), resumed_s=resumed)
            run.say(
                f"slot served again after {promoted:.2f} s; first completion after "
                f"{resumed if resumed is not None else '?'} s (bound {bound:g} s)"
            )
            if resumed is None or resumed > bound:
                run.problem(
                    f"processing did not resume within cluster-node-timeout + "
                    f"{RESUME_SLACK_S:g} s = {bound:g} s after {fault.kind} (resumed: {resumed})"
                )
            report.append(
                {"kind": fault.kind, "promoted_s": round(promoted, 3), "resumed_s": resumed}
            )
            if self.down:  # back as a replica of the new primary, ready for the next fault
                await asyncio.to_thread(self._restart_down, cluster)
        run.extra["failover"] = {
            "cluster_node_timeout_ms": cluster.node_timeout_ms,
            "resume_bound_s": bound,
            "faults": report,
            "replication_lag_ms": float(getattr(run.args, "replication_lag", 0.0) or 0.0),
        }

    async def _wait_promoted(
        self, cluster: EmbeddedCluster, run: ChaosRun, old: EmbeddedValkey
    ) -> None:
        deadline = time.monotonic() + _PROMOTION_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if await asyncio.to_thread(cluster.primary_for_key, _slot_key(run)) is not old:
                    return
            except Exception:  # no node claims the slot yet
                pass
            await asyncio.sleep(0.05)
        run.problem(f"no replica took over the slot within {_PROMOTION_TIMEOUT_S:g} s")

    def _restart_down(self, cluster: EmbeddedCluster) -> None:
        while self.down:
            cluster.restart_node(self.down.pop())
        cluster.wait_healthy(60.0)

    async def cleanup(self, run: ChaosRun) -> None:
        cluster = run.target.cluster
        if cluster is not None and self.down:
            try:
                await asyncio.to_thread(self._restart_down, cluster)
            except Exception as exc:  # the cluster is stopped next anyway
                run.say(f"could not restart the killed node: {exc}")
        while self.lags:
            await asyncio.to_thread(self.lags.pop().stop)
