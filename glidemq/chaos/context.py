"""The context of one run, `ChaosRun`: what a scenario's hooks get: the server, the fleet,
the seeded random source, the progress of the run, and the way to record faults and
problems."""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .ledger import Executions, Ledger
from .settings import FleetSettings
from .target import Target

if TYPE_CHECKING:
    from collections.abc import Mapping

    import psutil

    from ..client.connection import Client
    from ..queue.queue import Queue
    from .collect import JobRecord
    from .fleet import Fleet
    from .producer import Producer

__all__ = ["ChaosRun", "Fault", "Progress"]

_SPOOL = "ledger.spool.jsonl"


@dataclass
class Fault:
    """One injected fault: what, when (epoch seconds), on which process. `pids`: the
    processes it hurt (the victim and its children); `hits_all`: it hurt every process's
    work at once (a server, a network fault), not only its victim's."""

    kind: str
    at: float
    pid: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    recovery_s: float | None = None
    ended: float | None = None  # when the fault was lifted (a restarted server, a resumed pid)
    pids: tuple[int, ...] = ()
    hits_all: bool = False


@dataclass
class Progress:
    """The queue as the monitor last read it (every 0.1 s)."""

    done: int = 0  # completed + failed
    completed: int = 0
    failed: int = 0
    waiting: int = 0
    active: int = 0
    peak_backlog: int = 0
    read_at: float = 0.0
    errors: int = 0


@dataclass
class ChaosRun:
    """One run of one scenario. Scenarios read `target`, `fleet`, `rng`, `settings`,
    `args`, `progress`; they call `fault`, `problem`, `say`, `wait_progress`; they may put
    scenario-specific numbers into `extra` (they appear in the result)."""

    scenario: str
    args: argparse.Namespace
    settings: FleetSettings
    seed: int
    jobs: int
    target: Target
    queue_name: str
    workdir: Path
    quiet: bool = False
    worker_url: str = ""
    rng: random.Random = field(default_factory=random.Random)
    ledger: Ledger = field(default_factory=lambda: Ledger("default"))
    fleet: Fleet | None = None
    queue: Queue[Any, Any] | None = None
    client: Client | None = None  # a direct client of the run's own (not through a proxy)
    executions: Executions | None = None  # the processors' ledger, read before `check`
    records: Mapping[str, JobRecord] | None = None  # the jobs' hashes at the end, before `check`
    producer: Producer | None = None
    progress: Progress = field(default_factory=Progress)
    faults: list[Fault] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)  # reset when the producer starts
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        # spooled to the run's directory: a soak's million jobs would not fit in memory
        self.ledger = Ledger(f"{self.scenario}-{self.seed}", spool=self.workdir / _SPOOL)
        if not self.worker_url:
            self.worker_url = self.target.url

    # -- recording --------------------------------------------------------------------------

    def fault(
        self,
        kind: str,
        pid: int | None = None,
        *,
        pids: tuple[int, ...] | None = None,
        hits_all: bool | None = None,
        **detail: Any,
    ) -> Fault:
        """Record a fault injected now; returns it (set `ended` when it is lifted).
        `pids` (default: `pid`) are the processes it hurt; `hits_all` (default: no `pid`)
        says it hurt every process's work, as a server or network fault does."""
        hurt = pids if pids is not None else ((pid,) if pid is not None else ())
        everything = hits_all if hits_all is not None else pid is None
        f = Fault(
            kind=kind,
            at=time.time(),
            pid=pid,
            detail=dict(detail),
            pids=tuple(hurt),
            hits_all=everything,
        )
        self.faults.append(f)  # into the ledger at the end, with what it learned since
        where = f" pid {pid}" if pid is not None else ""
        self.say(f"fault {len(self.faults)}: {kind}{where} at {self.progress.done:,} done")
        return f

    def problem(self, text: str) -> None:
        """Record a broken invariant: the run fails (exit code 1)."""
        self.problems.append(text)

    def say(self, text: str) -> None:
        """A progress line on stderr."""
        if not self.quiet:
            elapsed = time.monotonic() - self._t0
            line = f"glidemq-chaos {self.scenario} [{elapsed:6.1f}s] {text}"
            print(line, file=sys.stderr, flush=True)

    # -- waiting ----------------------------------------------------------------------------

    async def wait_progress(self, fraction: float, timeout: float | None = None) -> bool:
        """Wait until `fraction` of the run's jobs are finished; False on `timeout`."""
        target = int(fraction * self.jobs)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.progress.done < target:
            if deadline is not None and time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def wait_workers(self, n: int, timeout: float = 60.0) -> list[psutil.Process]:
        """At least `n` ready (running, not stopped) worker processes, oldest pid first."""
        assert self.fleet is not None
        return await self.fleet.wait_ready(n, timeout)

    def fault_points(self, count: int, lo: float = 0.15, hi: float = 0.7) -> list[float]:
        """`count` seeded progress fractions in [lo, hi], sorted: when to inject faults."""
        return sorted(self.rng.uniform(lo, hi) for _ in range(count))
