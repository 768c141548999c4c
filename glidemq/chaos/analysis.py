"""Numbers of a run from its ledger: duplicates, stall times, recovery after each fault.

Pure functions over timestamps (epoch seconds), so they are easy to test and to replay.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Duplicates",
    "completions_rerun",
    "duplicates",
    "max_redelivery",
    "max_stall",
    "pre_fault_rate",
    "recovery_time",
]

# Throughput is measured over sliding windows of this length (seconds)...
WINDOW = 0.5
# ...moved in steps of this length.
STEP = 0.05
# The pre-fault rate is measured over at most this long before the fault.
PRE_WINDOW = 2.0


@dataclass(frozen=True)
class Duplicates:
    """At-least-once accounting.

    duplicates: extra full executions (a job whose processor finished N times adds N-1);
    duplicate_jobs: jobs whose processor finished more than once; redelivered_jobs: jobs
    started more than once (a run cut off by a crash included)."""

    duplicates: int
    duplicate_jobs: int
    redelivered_jobs: int
    extra_starts: int


def duplicates(
    started: Mapping[str, Sequence[object]], processed: Mapping[str, Sequence[object]]
) -> Duplicates:
    """Count duplicate and repeated executions per job."""
    dup = sum(max(0, len(v) - 1) for v in processed.values())
    dup_jobs = sum(1 for v in processed.values() if len(v) > 1)
    redelivered = sum(1 for v in started.values() if len(v) > 1)
    extra = sum(max(0, len(v) - 1) for v in started.values())
    return Duplicates(dup, dup_jobs, redelivered, extra)


def completions_rerun(
    acked: Mapping[str, Sequence[tuple[float, int]]],
    started: Mapping[str, Sequence[tuple[float, int]]],
) -> list[str]:
    """The jobs that started again after a worker was told their completion was stored:
    an acknowledged completion the server lost (a failover that took it)."""
    out = []
    for job_id, acks in acked.items():
        first = min(t for t, _ in acks)
        if any(t > first for t, _ in started.get(job_id, ())):
            out.append(job_id)
    return sorted(out)


def max_redelivery(
    started: Mapping[str, Sequence[tuple[float, int]]],
) -> tuple[float, str | None]:
    """The longest time between two consecutive starts of one job (an interrupted run and
    the run that replaced it, waiting in the queue again included), and that job's id;
    (0.0, None) when no job ran twice."""
    best, best_id = 0.0, None
    for job_id, runs in started.items():
        for (a, _), (b, _) in itertools.pairwise(runs):
            if b - a > best:
                best, best_id = b - a, job_id
    return best, best_id


def max_stall(
    started: Mapping[str, Sequence[tuple[float, int]]],
    stalled: Mapping[str, Sequence[float]],
) -> tuple[float, str | None]:
    """The longest time a job sat with a dead or frozen worker: from the start of the run
    that was cut off to stall recovery handing the job back (its `stalled` event); and
    that job's id. (0.0, None) when no job was recovered."""
    best, best_id = 0.0, None
    for job_id, times in stalled.items():
        starts = [t for t, _ in started.get(job_id, ())]
        for t in times:
            before = [s for s in starts if s <= t]
            if before and t - before[-1] > best:
                best, best_id = t - before[-1], job_id
    return best, best_id


def _count(times: Sequence[float], lo: float, hi: float) -> int:
    return bisect.bisect_left(times, hi) - bisect.bisect_left(times, lo)


def pre_fault_rate(times: Sequence[float], fault: float, run_start: float) -> float | None:
    """Completions per second over up to `PRE_WINDOW` before `fault` (sorted `times`);
    None when there is too little history (under one window) to tell."""
    lo = max(run_start, fault - PRE_WINDOW)
    first = bisect.bisect_left(times, lo)
    if first < len(times):
        lo = max(lo, times[first])  # the rate counts from the first completion, not the start
    span = fault - lo
    if span < WINDOW:
        return None
    return _count(times, lo, fault) / span


def recovery_time(
    times: Sequence[float], fault: float, run_start: float, until: float | None = None
) -> float | None:
    """Seconds from `fault` until throughput is back to half its pre-fault rate.

    Throughput is counted in windows of `WINDOW` seconds starting at `fault`, `fault +
    STEP`, ...; the answer is the start of the first window whose rate is at least half the
    pre-fault rate (0.0 when throughput never fell that low). None when the rate is not
    known before the fault or never comes back before the last completion (or `until`).
    """
    times = sorted(times)
    rate = pre_fault_rate(times, fault, run_start)
    if rate is None or rate <= 0 or not times:
        return None
    end = times[-1] if until is None else min(until, times[-1])
    need = 0.5 * rate * WINDOW
    t = fault
    while t + WINDOW <= end + 1e-9:
        if _count(times, t, t + WINDOW) >= need:
            return round(t - fault, 3)
        t += STEP
    return None
