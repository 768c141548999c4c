"""A lag on one cluster primary's replication link, for failover runs.

The replica reaches its primary through a FaultProxy that delays what the primary sends
(the replication stream) by `ms`; what the replica sends back (its acknowledgments) is not
delayed. Clients keep talking to the primary directly.

How the replica is made to go through the proxy: the primary announces a second loopback
address (`cluster-announce-ip 127.0.0.2`) to the other nodes, where one proxy per port
listens (the data port, delayed, and the cluster bus port, not delayed), and keeps
announcing its real address to clients (`cluster-announce-client-ipv4`). A Valkey replica
follows its primary's announced address, so it reconnects through the proxy and resyncs.

`cut()` aborts the proxied links and drops what they still hold: called just before the
primary is killed, it loses what the replica had not received yet, as a primary that dies
loses the replication stream it had not sent. So a write the primary acknowledged less than
`ms` before it died is lost, unless its caller waited for the replica (WAIT).
"""

from __future__ import annotations

import time
from typing import Any

from ..server.cluster import EmbeddedCluster
from ..server.valkey import EmbeddedValkey
from .errors import ChaosError
from .proxy import FaultProxy

__all__ = ["ALIAS", "BUS_PORT_OFFSET", "ReplicationLag"]

ALIAS = "127.0.0.2"
"""The second loopback address the proxies listen on (Linux routes 127.0.0.0/8 to lo)."""
BUS_PORT_OFFSET = 10000  # a node's cluster bus port is its port plus this by default


def _info(node: EmbeddedValkey) -> dict[str, str]:
    text = node.execute("INFO", "replication")
    out = {}
    for line in str(text).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


class ReplicationLag:
    """`ms` of lag between `primary` and its replica in `cluster` while started."""

    def __init__(self, cluster: EmbeddedCluster, primary: EmbeddedValkey, ms: float) -> None:
        self.cluster = cluster
        self.primary = primary
        self.ms = ms
        self.replica: EmbeddedValkey | None = None
        self._proxies: list[FaultProxy] = []

    def start(self, timeout: float = 30.0) -> ReplicationLag:
        """Put the proxies in between and wait until the replica's link goes through them."""
        primary = self.primary
        self.replica = self.cluster.replica_of(primary)
        data = FaultProxy((primary.host, primary.port), host=ALIAS, port=primary.port)
        bus_port = primary.port + BUS_PORT_OFFSET
        bus = FaultProxy((primary.host, bus_port), host=ALIAS, port=bus_port)
        self._proxies = [data.start(), bus.start()]
        data.set_latency(self.ms, direction="down")
        primary.execute("CONFIG", "SET", "cluster-announce-client-ipv4", primary.host)
        primary.execute("CONFIG", "SET", "cluster-announce-ip", ALIAS)
        deadline = time.monotonic() + timeout
        while True:
            info = _info(self.replica)
            if info.get("master_host") == ALIAS and info.get("master_link_status") == "up":
                return self
            if time.monotonic() > deadline:
                raise ChaosError(
                    f"the replica {self.replica.port} did not relink through the lag proxy "
                    f"within {timeout:g} s: {info.get('master_host')} "
                    f"{info.get('master_link_status')}"
                )
            time.sleep(0.05)

    def cut(self) -> int:
        """Abort the proxied replication links, dropping what they hold; returns how many."""
        return sum(p.reset() for p in self._proxies[:1])

    def status(self) -> dict[str, Any]:
        """The data proxy's counters and settings."""
        return self._proxies[0].status() if self._proxies else {}

    def stop(self) -> None:
        """Close the proxies; a primary still running announces its own address again."""
        if self.primary.running:
            for name, value in (("cluster-announce-ip", ""), ("cluster-announce-client-ipv4", "")):
                try:
                    self.primary.execute("CONFIG", "SET", name, value)
                except Exception:  # it may be going down with the run
                    break
        for proxy in self._proxies:
            proxy.close()
        self._proxies = []
