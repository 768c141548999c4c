"""memory-kill: sandbox children that grow past `--max-memory-per-child` while they run.

`--faults N` seeded jobs allocate three times the limit. A child's address space is capped
at twice the limit above its size at start (the sandbox's hard limit), so the growing run
fails with MemoryError at the cap and the child is retired and replaced; the worker process
lives on. The job is retried per its attempts: half the growing jobs grow on their first
attempt only and must complete on a retry; the others grow every time and must fail after
exactly `--attempts` executions, a predicted failure. Other runs that shared the child may
lose an attempt to the same MemoryError (re-executions, bounded).
"""

from __future__ import annotations

import argparse

from ..context import ChaosRun
from ..outcomes import Prediction
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["MemoryKill"]

OUT_OF_MEMORY = Prediction(
    pattern=r"MemoryError",
    kinds=("memory-grow",),
    because="the job grows past the child's memory cap on every attempt: each attempt "
    "fails with MemoryError and the child is replaced; after the last one the job fails",
)


@register
class MemoryKill(Scenario):
    name = "memory-kill"
    summary = "sandbox children grow past --max-memory-per-child: retired, jobs retried"
    defaults = FleetSettings(
        procs=2, concurrency=4, job_ms=20.0, sandbox=True, attempts=3, faults=4
    )
    predictions = (OUT_OF_MEMORY,)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--max-memory-per-child",
            type=int,
            default=64,
            metavar="MB",
            help="glidemq-run --max-memory-per-child (default 64)",
        )

    def fleet_args(self, run: ChaosRun) -> list[str]:
        return ["--max-memory-per-child", str(run.args.max_memory_per_child)]

    def _growers(self, run: ChaosRun) -> tuple[list[str], list[str]]:
        """(grow on every attempt, grow on the first only), seeded, spread over the run."""
        picks = sorted({int(p * run.jobs) for p in run.fault_points(run.settings.faults, 0.1, 0.6)})
        ids = [f"j{i}" for i in picks]
        return ids[::2], ids[1::2]

    def job_data(self, run: ChaosRun) -> dict[str, dict[str, object]]:
        grow = 3 * int(run.args.max_memory_per_child)
        always, once = self._growers(run)
        run.extra["_growers"] = (always, once)
        data: dict[str, dict[str, object]] = {j: {"grow_mb": grow} for j in always}
        data.update({j: {"grow_mb": grow, "grow_attempts": 1} for j in once})
        return data

    async def inject(self, run: ChaosRun) -> None:
        always, once = run.extra["_growers"]
        run.fault(
            "memory-grow",
            None,
            hits_all=False,
            jobs=always + once,
            grow_mb=3 * int(run.args.max_memory_per_child),
        )

    def reexecution_bound(self, run: ChaosRun) -> int:
        always, once = run.extra.get("_growers", ([], []))
        s = run.settings
        return (len(always) + len(once)) * s.attempts * (2 * s.concurrency + 2)

    def check(self, run: ChaosRun) -> None:
        assert run.executions is not None and run.fleet is not None
        always, once = run.extra["_growers"]
        starts = {j: len(run.executions.started.get(j, [])) for j in always + once}
        run.extra["memory_kill"] = {
            "always_grow": always,
            "grow_once": once,
            "executions": starts,
            "limit_mb": int(run.args.max_memory_per_child),
        }
        attempts = run.settings.attempts
        for j in always:
            if starts[j] != attempts:
                run.problem(
                    f"memory-kill: {j} grows past the cap on every attempt and should have run "
                    f"{attempts} times, ran {starts[j]}"
                )
        for j in once:
            if starts[j] < 2:
                run.problem(f"memory-kill: {j} grew past the cap once and was not retried")
        started = run.fleet.log_text().count("started worker slot")
        if started != run.settings.procs:
            run.problem(
                f"memory-kill: a child's memory took a worker process down (started {started} "
                f"worker processes for {run.settings.procs} slots)"
            )
