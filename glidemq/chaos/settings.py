"""The settings of a chaos run that the runner, the targets and the scenarios share: the
server kinds and the fleet's per-scenario defaults."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SERVER_KINDS", "FleetSettings", "ServerKind"]

ServerKind = str
"""Which server the runner starts when no `--url` is given: `standalone`, `aof` (standalone
with `appendonly yes`, `appendfsync everysec`) or `cluster` (3 primaries + 3 replicas)."""

SERVER_KINDS: tuple[ServerKind, ...] = ("standalone", "aof", "cluster")


@dataclass(frozen=True)
class FleetSettings:
    """Per-scenario defaults of the common flags (each one can be overridden on the command
    line). Times: `_ms` in milliseconds, otherwise seconds.

    procs / concurrency / sandbox: the `glidemq-run` fleet; job_ms: how long the fixture
    processor sleeps per job; attempts: job attempts (retries absorb sandbox crashes);
    faults: how many faults `inject` injects; rate: producer jobs per second (0: as fast as
    it can); lock_duration_ms / stalled_interval_ms / heartbeat_timeout: passed to
    `glidemq-run`, small so a stalled job is recovered within seconds.
    """

    procs: int = 2
    concurrency: int = 8
    job_ms: float = 20.0
    sandbox: bool = False
    attempts: int = 1
    faults: int = 1
    rate: float = 0.0
    lock_duration_ms: int = 1500
    stalled_interval_ms: int = 500
    heartbeat_timeout: float = 5.0
