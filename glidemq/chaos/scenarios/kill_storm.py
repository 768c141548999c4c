"""kill-storm: SIGKILL a random glidemq-run worker process every `--every` seconds for
`--storm-s` seconds (defaults: every 0.5 s for 60 s, under 4 processes).

The supervisor must keep replacing them without backing off so far that the fleet stops:
the run reports the longest time without a single completion during the storm (from the
processors' own ledger) and fails when it is above `--max-gap` (default: lock duration +
stalled interval + 3 s, the time a dead process's jobs need to come back, plus slack).

A stall is charged only for a run that started: the run fails when a job failed by the
stall limit although the processors' ledger shows fewer than `--max-stalled` + 1 starts of
it (`--max-stalled` is the fixture processor's max_stalled_count, 20 unless given; 1, the
default of a Worker, makes a storm charge every job it kills while running).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import time

from ..app import MAX_STALLED_ENV
from ..context import ChaosRun
from ..faults import kill_process, process_tree
from ..outcomes import Prediction
from ..registry import register
from ..scenario import FleetSettings, Scenario

__all__ = ["KillStorm", "longest_gap"]

STALLED_PREFIX = "job stalled more than allowable limit"

STALLED_TOO_OFTEN = Prediction(
    pattern=r"stalled more than allowable limit",
    kinds=("sigkill-worker",),
    because="a job whose process was killed under it more often than its max_stalled_count "
    "(20 for the fixture processor) fails",
)


def longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest stretch of [start, end] without a time from `times` (epoch seconds), and
    where it began."""
    inside = sorted(t for t in times if start <= t <= end)
    best, at = 0.0, start
    for a, b in itertools.pairwise([start, *inside, end]):
        if b - a > best:
            best, at = b - a, a
    return best, at


@register
class KillStorm(Scenario):
    name = "kill-storm"
    summary = "SIGKILL a random worker process every 0.5 s for 60 s; report the longest stall"
    defaults = FleetSettings(procs=4, concurrency=4, job_ms=20.0, faults=0, rate=80.0)
    predictions = (STALLED_TOO_OFTEN,)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--storm-s",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="how long the storm lasts (default 60)",
        )
        parser.add_argument(
            "--every",
            type=float,
            default=0.5,
            metavar="SECONDS",
            help="time between two kills (default 0.5)",
        )
        parser.add_argument(
            "--max-gap",
            type=float,
            metavar="SECONDS",
            help="fail when no job completed for longer than this during the storm "
            "(default: lock duration + stalled interval + 3 s)",
        )
        parser.add_argument(
            "--max-stalled",
            type=int,
            default=20,
            metavar="N",
            help="the processor's max_stalled_count (default 20)",
        )

    def fleet_env(self, run: ChaosRun) -> dict[str, str]:
        return {MAX_STALLED_ENV: str(int(run.args.max_stalled))}

    async def inject(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        await run.wait_progress(0.02)
        every, length = float(run.args.every), float(run.args.storm_s)
        began = time.time()
        run.extra["_storm"] = (began, began + length)
        missed = 0
        tick = time.monotonic()
        stop = tick + length
        while time.monotonic() < stop and run.progress.done < run.jobs:
            workers = run.fleet.ready_workers()
            if workers:
                victim = run.rng.choice(workers)
                hurt = process_tree(victim)
                if kill_process(victim, signal.SIGKILL):
                    run.fault("sigkill-worker", victim.pid, pids=hurt, workers=len(workers))
            else:
                missed += 1  # every process is down or still booting
            tick += every
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
        ended = time.time()
        run.extra["_storm"] = (began, ended)
        run.extra["storm"] = {
            "duration_s": round(ended - began, 3),
            "kills": len(run.faults),
            "ticks_without_a_ready_process": missed,
        }

    def check(self, run: ChaosRun) -> None:
        storm = run.extra.get("_storm")
        if storm is None or run.executions is None:
            return
        s = run.settings
        bound = run.args.max_gap
        if bound is None:
            bound = (s.lock_duration_ms + s.stalled_interval_ms) / 1000 + 3.0
        ends = [t for runs in run.executions.processed.values() for t, _ in runs]
        gap, at = longest_gap(ends, *storm)
        started = run.fleet.log_text().count("started worker slot") if run.fleet else 0
        run.extra["storm"].update(
            longest_gap_s=round(gap, 3),
            longest_gap_at_s=round(at - run.started_at, 3),
            max_gap_s=bound,
            workers_started=started,
        )
        run.say(f"longest time without a completion during the storm: {gap:.2f} s")
        self._check_charges(run)
        if gap > bound:
            run.problem(
                f"kill-storm: no job completed for {gap:.2f} s during the storm "
                f"(bound {bound:g} s): the fleet stopped working under repeated kills"
            )

    def _check_charges(self, run: ChaosRun) -> None:
        """No job failed by the stall limit that started fewer than max_stalled + 1 times."""
        if run.records is None or run.executions is None:
            return
        limit = int(run.args.max_stalled) + 1
        started = run.executions.started
        stalled = [
            r.job_id
            for r in run.records.values()
            if r.state == "failed" and (r.failed_reason or "").startswith(STALLED_PREFIX)
        ]
        short = sorted(j for j in stalled if len(started.get(j, ())) < limit)
        run.extra["storm"].update(
            failed_by_stalls=len(stalled), failed_with_fewer_starts=len(short)
        )
        run.say(
            f"{len(stalled)} jobs failed by the stall limit, {len(short)} of them with fewer "
            f"than {limit} starts"
        )
        if short:
            run.problem(
                f"kill-storm: {len(short)} jobs failed by the stall limit although they started "
                f"fewer than {limit} times: {', '.join(short[:5])}"
            )
