"""A local Valkey cluster built from :class:`~glidemq.server.EmbeddedValkey` nodes.

For tests of cluster behaviour: slot ownership, failover after a crash, nodes rejoining.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .valkey import (
    CLUSTER_SLOTS,
    EmbeddedServerError,
    EmbeddedValkey,
    Reply,
    parse_info,
    valkey_cli_path,
)

__all__ = ["EmbeddedCluster"]

_LINK_SETTLE_SECONDS = 1.5  # a replica ACKs once per second; margin for a busy machine


def _node_lines(text: Reply) -> list[list[str]]:
    """Split ``CLUSTER NODES`` output into whitespace-separated fields per node."""
    return [line.split() for line in str(text).splitlines() if line.strip()]


def _slot_ranges(fields: list[str]) -> list[tuple[int, int]]:
    ranges = []
    for item in fields[8:]:
        if item.startswith("["):  # importing/migrating marker, not ownership
            continue
        start, _, end = item.partition("-")
        ranges.append((int(start), int(end or start)))
    return ranges


def _failing_ids(text: Reply) -> set[str]:
    """Ids of nodes flagged ``fail`` or ``fail?`` in one node's view."""
    return {
        fields[0] for fields in _node_lines(text) if {"fail", "fail?"} & set(fields[2].split(","))
    }


def _slot_map(text: Reply) -> frozenset[tuple[int, int, str]]:
    """Return ``{(first_slot, last_slot, owner_id)}`` as one node sees the cluster."""
    return frozenset(
        (start, end, fields[0])
        for fields in _node_lines(text)
        if "master" in fields[2].split(",")
        for start, end in _slot_ranges(fields)
    )


def _roles(text: Reply, ids: set[str]) -> frozenset[tuple[str, str, str]]:
    """Return ``{(node_id, role, primary_id)}`` for the nodes in ``ids`` as one node sees them."""
    return frozenset(
        (fields[0], "master" if "master" in fields[2].split(",") else "slave", fields[3])
        for fields in _node_lines(text)
        if fields[0] in ids
    )


def _online_replica_ports(repl: dict[str, str]) -> set[int]:
    """Ports of the replicas a primary's ``INFO replication`` lists as ``state=online``."""
    ports = set()
    for key, value in repl.items():
        if key.startswith("slave") and key[5:].isdigit():
            entry = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
            if entry.get("state") == "online":
                ports.add(int(entry.get("port", 0)))
    return ports


class EmbeddedCluster:
    """A local Valkey cluster of ``primaries`` primaries with ``replicas_per_primary`` each.

    Every node is an :class:`EmbeddedValkey` with its own port, temp dir and
    ``nodes-PORT.conf``. Roles are always read from the live nodes, because failovers move
    them. :attr:`url` lists every node: ``valkey://h:p1,h:p2,...``.

    ``ports`` fixes the nodes' ports (default: free ones). With ``dir``, node ``PORT`` keeps
    its data and ``nodes-PORT.conf`` in ``dir/PORT`` (kept on stop), and a cluster whose
    nodes all have their config there is restarted as it was instead of created anew.
    """

    def __init__(
        self,
        *,
        primaries: int = 3,
        replicas_per_primary: int = 1,
        host: str = "127.0.0.1",
        node_timeout_ms: int = 2000,
        extra_args: Sequence[str] = (),
        ports: Sequence[int] | None = None,
        dir: Path | None = None,
        appendonly: bool = False,
    ) -> None:
        if primaries < 3:
            raise ValueError("a Valkey cluster needs at least 3 primaries")
        if replicas_per_primary < 0:
            raise ValueError("replicas_per_primary must be >= 0")
        count = primaries * (1 + replicas_per_primary)
        if ports is not None and len(set(ports)) != count:
            raise ValueError(f"ports must name {count} different ports")
        if dir is not None and ports is None:
            raise ValueError("a cluster with a data dir needs fixed ports")
        self._ports = list(ports) if ports is not None else None
        self._dir = dir
        self._appendonly = appendonly
        self._host = host
        self._primaries = primaries
        self._replicas_per_primary = replicas_per_primary
        self._node_timeout_ms = node_timeout_ms
        self._node_args = ["--cluster-node-timeout", str(node_timeout_ms), *extra_args]
        self._nodes: list[EmbeddedValkey] = []
        # (primary port, replica port, sync id) -> when the link was first seen online
        self._online_since: dict[tuple[int, int, str], float] = {}

    @property
    def node_timeout_ms(self) -> int:
        """``cluster-node-timeout`` of every node: a dead primary is failed over after about
        this long (plus the election)."""
        return self._node_timeout_ms

    @property
    def nodes(self) -> list[EmbeddedValkey]:
        """All nodes in creation order (primaries first at creation time), running or not."""
        return list(self._nodes)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every node."""
        return [(node.host, node.port) for node in self._nodes]

    @property
    def url(self) -> str:
        """Seed URL naming every node: ``valkey://host:port1,host:port2,...``."""
        return "valkey://" + ",".join(f"{host}:{port}" for host, port in self.addresses)

    def start(self, timeout: float = 60.0) -> Self:
        """Start the nodes, create the cluster and wait until it is fully healthy.

        Healthy includes every replica having finished its first sync: a primary that dies
        before that is never replaced.
        """
        if self._nodes:
            return self
        deadline = time.monotonic() + timeout
        count = self._primaries * (1 + self._replicas_per_primary)
        ports: Sequence[int | None] = self._ports or [None] * count
        self._nodes = [
            EmbeddedValkey(
                host=self._host,
                port=port,
                cluster_enabled=True,
                extra_args=self._node_args,
                appendonly=self._appendonly,
                dir=None if self._dir is None or port is None else self._dir / str(port),
            )
            for port in ports
        ]
        # Nodes that all kept their cluster config rejoin by themselves.
        known = self._dir is not None and all(
            (self._dir / str(port) / f"nodes-{port}.conf").is_file() for port in ports
        )
        try:
            for node in self._nodes:
                node.start(max(1.0, deadline - time.monotonic()))
            if not known:
                self._create(max(1.0, deadline - time.monotonic()))
            self.wait_healthy(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, timeout: float) -> None:
        argv = [str(valkey_cli_path()), "--cluster", "create"]
        argv += [f"{host}:{port}" for host, port in self.addresses]
        argv += ["--cluster-replicas", str(self._replicas_per_primary), "--cluster-yes"]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedServerError(
                f"valkey-cli --cluster create took over {timeout:.1f}s"
            ) from exc
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            raise EmbeddedServerError(f"valkey-cli --cluster create failed:\n{tail}")

    def stop(self) -> None:
        """Stop every node and remove their temp dirs; safe to call more than once."""
        for node in self._nodes:  # signal all first so the nodes shut down in parallel
            node.kill(signal.SIGTERM, wait=False)
        for node in self._nodes:
            node.stop()
        self._nodes = []

    # -- live topology

    def _running(self) -> list[EmbeddedValkey]:
        running = [node for node in self._nodes if node.running]
        if not running:
            raise EmbeddedServerError("no cluster node is running")
        return running

    @staticmethod
    def role(node: EmbeddedValkey) -> str:
        """``"master"`` or ``"slave"``, as the node itself reports it (``ROLE``)."""
        reply = node.execute("ROLE")
        if not isinstance(reply, list) or not reply:
            raise EmbeddedServerError(f"unexpected ROLE reply from {node.url}: {reply!r}")
        return str(reply[0])

    def primaries(self) -> list[EmbeddedValkey]:
        """Running nodes that currently act as primaries."""
        return [node for node in self._running() if self.role(node) == "master"]

    def replicas(self) -> list[EmbeddedValkey]:
        """Running nodes that currently act as replicas."""
        return [node for node in self._running() if self.role(node) == "slave"]

    def keyslot(self, key: str) -> int:
        """Hash slot of ``key`` (``CLUSTER KEYSLOT``)."""
        reply = self._running()[0].execute("CLUSTER", "KEYSLOT", key)
        if not isinstance(reply, int):
            raise EmbeddedServerError(f"unexpected CLUSTER KEYSLOT reply: {reply!r}")
        return reply

    def primary_for_key(self, key: str) -> EmbeddedValkey:
        """The running primary that serves ``key``'s slot, by its own claim.

        If two nodes claim the slot (a stale primary just restarted), the one with the
        higher config epoch wins, as it does in the cluster.
        """
        slot = self.keyslot(key)
        claims: list[tuple[int, EmbeddedValkey]] = []
        for node in self._running():
            for fields in _node_lines(node.execute("CLUSTER", "NODES")):
                flags = fields[2].split(",")
                owns = any(lo <= slot <= hi for lo, hi in _slot_ranges(fields))
                if owns and "myself" in flags and "master" in flags:
                    claims.append((int(fields[6]), node))
        if not claims:
            raise EmbeddedServerError(f"no running primary serves slot {slot} (key {key!r})")
        return max(claims, key=lambda claim: claim[0])[1]

    def replica_of(self, primary: EmbeddedValkey) -> EmbeddedValkey:
        """A running replica currently replicating from ``primary``."""
        for node in self._running():
            reply = node.execute("ROLE")
            if isinstance(reply, list) and reply[0] == "slave" and reply[2] == primary.port:
                return node
        raise EmbeddedServerError(f"no running replica of {primary.url}")

    # -- faults

    def _own(self, node: EmbeddedValkey) -> EmbeddedValkey:
        if not any(node is mine for mine in self._nodes):
            raise ValueError(f"{node!r} is not a node of this cluster")
        return node

    def kill_node(self, node: EmbeddedValkey) -> None:
        """Crash ``node`` with SIGKILL; its dir and ``nodes-PORT.conf`` stay for a restart."""
        self._own(node).kill(signal.SIGKILL)

    def restart_node(self, node: EmbeddedValkey, timeout: float = 10.0) -> EmbeddedValkey:
        """Start ``node`` again on its port and dir, so it rejoins with its old identity."""
        return self._own(node).restart(timeout)

    def failover(self, replica: EmbeddedValkey, force: bool = False, timeout: float = 30.0) -> None:
        """Promote ``replica`` with ``CLUSTER FAILOVER [FORCE]``; wait until it is a primary
        and the cluster is healthy again."""
        deadline = time.monotonic() + timeout
        self._own(replica)
        args = ["CLUSTER", "FAILOVER", *(["FORCE"] if force else [])]
        asked = 0.0
        while self.role(replica) != "master":
            now = time.monotonic()
            if now > deadline:
                raise EmbeddedServerError(f"{replica.url} was not promoted within {timeout}s")
            # The server answers OK at once and silently gives up after 5 s: ask again then.
            if now - asked > 6.0:
                replica.execute(*args)
                asked = now
            time.sleep(0.05)
        self.wait_healthy(max(0.0, deadline - time.monotonic()))

    # -- health

    def health_problem(self) -> str | None:
        """Describe the first reason the cluster is not healthy, or ``None`` if it is."""
        try:
            running = self._running()
            ids = {str(node.execute("CLUSTER", "MYID")) for node in running}
            views, roles = [], []
            links: list[tuple[int, int]] = []  # (primary port, replica port)
            online: dict[int, dict[int, str]] = {}  # primary port -> {replica port: sync id}
            for node in running:
                info = parse_info(node.execute("CLUSTER", "INFO"))
                if info.get("cluster_state") != "ok":
                    return f"{node.port}: cluster_state:{info.get('cluster_state')}"
                if info.get("cluster_slots_ok") != str(CLUSTER_SLOTS):
                    return f"{node.port}: cluster_slots_ok:{info.get('cluster_slots_ok')}"
                repl = parse_info(node.execute("INFO", "replication", "stats"))
                if repl.get("role") == "slave":
                    if repl.get("master_link_status") != "up":
                        return f"{node.port}: master_link_status:{repl.get('master_link_status')}"
                    links.append((int(repl.get("master_port", 0)), node.port))
                else:
                    # A new sync or a new process restarts the settling time of a link.
                    syncs = f"{node.pid}/{repl.get('sync_full')}/{repl.get('sync_partial_ok')}"
                    online[node.port] = {port: syncs for port in _online_replica_ports(repl)}
                nodes_text = node.execute("CLUSTER", "NODES")
                if flagged := _failing_ids(nodes_text) & ids:
                    return f"{node.port} still flags running node(s) {sorted(flagged)} as failing"
                roles.append(_roles(nodes_text, ids))
                views.append(_slot_map(nodes_text))
        except (OSError, EmbeddedServerError) as exc:
            return f"{type(exc).__name__}: {exc}"
        # After a sync the primary sends writes only once the replica's next ACK arrives
        # (ACKs come every second), and WAIT already counts the replica before that: a
        # primary crash in this window loses acknowledged writes. So a link must have been
        # online for a while before the cluster counts as healthy.
        now, settling = time.monotonic(), None
        for primary_port, replica_port in links:
            sync_id = online.get(primary_port, {}).get(replica_port)
            if sync_id is None:
                return f"{primary_port} does not list its replica {replica_port} as online"
            since = self._online_since.setdefault((primary_port, replica_port, sync_id), now)
            if now - since < _LINK_SETTLE_SECONDS:
                settling = f"replication {primary_port} -> {replica_port} is still settling"
        if any(view != views[0] for view in views):
            return "nodes disagree on the slot map"
        # Stale roles make votes fail: a replica still seen as a primary is refused failover.
        if any(view != roles[0] for view in roles):
            return "nodes disagree on who is primary and who replicates whom"
        if sum(hi - lo + 1 for lo, hi, _ in views[0]) != CLUSTER_SLOTS:
            return "not every slot has an owner"
        if any(owner not in ids for _, _, owner in views[0]):
            return "a slot is still owned by a node that is not running"
        return settling

    def wait_healthy(self, timeout: float = 30.0) -> Self:
        """Wait until every running node says ``cluster_state:ok``, all agree on the roles
        and on a slot map whose 16384 slots are served by running primaries, none flags a
        running node as failing, and every running replica has been streamed to by its
        primary for over a second (before that, acknowledged writes can still be lost)."""
        deadline = time.monotonic() + timeout
        while (problem := self.health_problem()) is not None:
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"cluster not healthy after {timeout:.1f}s: {problem}")
            time.sleep(0.05)
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedCluster({', '.join(f'{h}:{p}' for h, p in self.addresses)})"
