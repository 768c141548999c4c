"""What a chaos scenario is: its fleet settings and the hooks the runner calls.

A scenario is a `Scenario` subclass in a module of `glidemq.chaos.scenarios`, decorated with
`@register`. The runner (`glidemq.chaos.lifecycle`) does everything else: it starts the server,
the `glidemq-run` fleet and the producer, calls the hooks, drains, collects the ledger and
checks the invariants. Order of the hooks in one run:

1. `unavailable(args)`: a reason to skip the scenario (and `all` reports it), or None;
2. `prepare(run)`: the server is up, nothing else runs yet; may set `run.worker_url`, the
   address the fleet and the producer use (a proxy in front of the server, for instance;
   the run's own monitoring and the final collection always use `run.target.url`);
3. `inject(run)`: runs concurrently with the producer and the fleet; injects the faults,
   recording each with `run.fault(...)`; the run drains once it and the producer returned;
4. `check(run)`: the fleet has stopped and the ledger is collected; add scenario-specific
   invariant failures with `run.problem(...)`;
5. `cleanup(run)`: always, last (stop a proxy, restart a node left down, ...).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, ClassVar

from ..types import WorkerOptions
from ..worker.hold import default_max_held
from .outcomes import Prediction
from .settings import SERVER_KINDS, FleetSettings, ServerKind

if TYPE_CHECKING:
    from .context import ChaosRun

__all__ = ["SERVER_KINDS", "FleetSettings", "Scenario", "ServerKind", "hold_budget"]


def hold_budget(concurrency: int, job_ms: float) -> int:
    """Jobs a fleet process holds beyond its concurrency with the default hold window, for
    jobs of `job_ms` (glidemq/worker/hold.py)."""
    work = concurrency * WorkerOptions().hold_window
    cap = default_max_held(concurrency)
    return cap if job_ms <= 0 or work >= job_ms * cap else int(work / job_ms)


class Scenario:
    """Base class of a chaos scenario; override `inject` and, when needed, the other hooks.

    Class attributes: `name` (the subcommand), `summary` (one line for `--help`), `server`
    (a `ServerKind`), `controls_server` (True when the scenario kills, restarts or fails over
    the server itself, so it cannot run against `--url`), `defaults` (`FleetSettings`),
    `predictions` (the failures its faults may cause, each with its reason: a job failed
    that way is a predicted failure, any other failure fails the run), `in_all` (False
    keeps it out of `glidemq-chaos all`).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    server: ClassVar[ServerKind] = "standalone"
    controls_server: ClassVar[bool] = False
    defaults: ClassVar[FleetSettings] = FleetSettings()
    predictions: ClassVar[tuple[Prediction, ...]] = ()
    in_all: ClassVar[bool] = True

    def settings(self, settings: FleetSettings, args: argparse.Namespace) -> FleetSettings:
        """The fleet settings once the flags are applied; may derive one from another."""
        return settings

    def fleet_args(self, run: ChaosRun) -> list[str]:
        """Extra `glidemq-run` flags of this scenario (a memory limit, a metrics port)."""
        return []

    def fleet_env(self, run: ChaosRun) -> dict[str, str]:
        """Extra environment of the fleet (settings of the fixture processor)."""
        return {}

    def job_data(self, run: ChaosRun) -> dict[str, dict[str, object]]:
        """Extra data for some jobs, by id (planted behaviours of the fixture processor)."""
        return {}

    def job_options(self, run: ChaosRun) -> dict[str, object]:
        """Extra options for every job (`remove_on_complete=N` makes the run follow the
        completed set while it goes on: see `glidemq.chaos.harvest`)."""
        return {}

    def reexecution_bound(self, run: ChaosRun) -> int:
        """The most re-executions (starts beyond the first, summed over jobs) the injected
        faults can explain. A fault on one process may cut off or duplicate what that
        process held (its concurrency, plus results finished but not yet reported, plus
        the jobs it holds beyond its concurrency, which it runs while the server is out of
        reach); a server or network fault, what every process held."""
        s = run.settings
        held = 2 * s.concurrency + 2
        if not s.sandbox:
            held += hold_budget(s.concurrency, s.job_ms)
        return sum(held * (s.procs if f.hits_all else 1) for f in run.faults)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add flags of this scenario only (the common ones exist already)."""

    def unavailable(self, args: argparse.Namespace) -> str | None:
        """Why this scenario cannot run with these arguments here, or None."""
        if self.controls_server and getattr(args, "url", None):
            return f"{self.name} controls the server itself and cannot run against --url"
        return None

    async def prepare(self, run: ChaosRun) -> None:
        """Called once the server is up, before the fleet and the producer start."""

    async def inject(self, run: ChaosRun) -> None:
        """Inject the faults while jobs flow; return when done (the run then drains)."""
        raise NotImplementedError

    def check(self, run: ChaosRun) -> None:
        """Scenario-specific invariants, after the drain; report with `run.problem`."""

    async def cleanup(self, run: ChaosRun) -> None:
        """Always called last, even when the run failed."""
