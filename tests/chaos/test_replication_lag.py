"""The replication lag of `glidemq-chaos failover --replication-lag`, on a cluster of its
own: the replica really goes through the delaying proxy (a write is not on it before the
lag has passed, so a short WAIT falls short and a long one is met), clients still reach the
primary directly, and `cut()` drops what the link held."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from glidemq import ConnectionOptions, DurabilityTimeoutError, Queue
from glidemq.chaos.replication import ALIAS, ReplicationLag
from glidemq.server.cluster import EmbeddedCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

LAG_MS = 400


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    """A 3+3 cluster of this module alone: the lag changes what a primary announces."""
    c = EmbeddedCluster().start()
    try:
        yield c
    finally:
        c.stop()


def _conn(cluster: EmbeddedCluster, timeout_ms: int) -> ConnectionOptions:
    return ConnectionOptions(
        addresses=tuple(cluster.addresses),
        cluster=True,
        durability="replicated",
        durability_timeout_ms=timeout_ms,
    )


async def test_the_replica_lags_behind_its_primary(cluster: EmbeddedCluster) -> None:
    primary = cluster.primary_for_key("glide:{lagged}:meta")
    lag = ReplicationLag(cluster, primary, LAG_MS).start()
    try:
        assert lag.replica is not None
        role = lag.replica.execute("ROLE")
        assert isinstance(role, list) and role[1] == ALIAS and role[2] == primary.port
        # clients are still told the primary's own address
        assert (
            str(primary.execute("CONFIG", "GET", "cluster-announce-client-ipv4")).find(primary.host)
            >= 0
        )
        async with Queue("lagged", connection=_conn(cluster, 50)) as short:
            # a write cannot reach the replica before the lag passed: a 50 ms wait falls short
            with pytest.raises(DurabilityTimeoutError):
                await short.add("x", {})
        async with Queue("lagged", connection=_conn(cluster, 10 * LAG_MS)) as long:
            assert await long.add("y", {}) is not None  # met once the lag passed
            assert lag.status()["latency_ms"] == LAG_MS
            assert lag.cut() >= 1  # the replication link, aborted
            await long.obliterate(force=True)
    finally:
        lag.stop()
    assert primary.execute("CONFIG", "GET", "cluster-announce-ip") == ["cluster-announce-ip", ""]
