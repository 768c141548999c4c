"""The server a chaos run works against: one it starts (and may hurt) or one given by `--url`."""

from __future__ import annotations

from dataclasses import dataclass

from ..server.cluster import EmbeddedCluster
from ..server.valkey import EmbeddedValkey
from .settings import SERVER_KINDS, ServerKind

__all__ = ["Target", "start_target"]


@dataclass
class Target:
    """Where the run's Valkey is. `standalone` / `cluster` are set when this process
    started the server (so a scenario can kill, restart or fail it over); both are None
    for a server given by `--url`."""

    url: str
    kind: ServerKind | str
    standalone: EmbeddedValkey | None = None
    cluster: EmbeddedCluster | None = None

    @property
    def embedded(self) -> bool:
        return self.standalone is not None or self.cluster is not None

    def describe(self) -> str:
        """`standalone`, `aof`, `cluster` or `external`, for the result."""
        return str(self.kind)

    def stop(self) -> None:
        """Stop a server this process started; a `--url` server is left alone."""
        if self.standalone is not None:
            self.standalone.stop()
        if self.cluster is not None:
            self.cluster.stop()


def start_target(
    kind: ServerKind,
    url: str | None = None,
    timeout: float = 60.0,
    node_timeout_ms: int | None = None,
) -> Target:
    """Start an embedded server of `kind`, or wrap `url` (then nothing is started).
    `node_timeout_ms`: the cluster's `cluster-node-timeout` (default: the cluster's own)."""
    if url:
        return Target(url=url, kind="external")
    if kind not in SERVER_KINDS:
        raise ValueError(f"unknown server kind {kind!r}; one of {SERVER_KINDS}")
    if kind == "cluster":
        cluster = (
            EmbeddedCluster(node_timeout_ms=node_timeout_ms)
            if node_timeout_ms is not None
            else EmbeddedCluster()
        ).start(timeout)
        return Target(url=cluster.url, kind=kind, cluster=cluster)
    server = EmbeddedValkey(appendonly=kind == "aof", appendfsync="everysec").start()
    return Target(url=server.url, kind=kind, standalone=server)
