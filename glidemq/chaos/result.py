"""The one JSON object a run prints: counts, duplicates, stall and recovery times, faults."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from .analysis import duplicates, max_redelivery, max_stall, recovery_time
from .collect import EventsTail, JobRecord
from .invariants import Verdict
from .ledger import Executions
from .run import ChaosRun

__all__ = ["build_result", "machine"]


def machine() -> dict[str, Any]:
    """The machine a run ran on, for comparing numbers across runs."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(terse=True),
        "python": platform.python_version(),
    }


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def build_result(
    run: ChaosRun,
    enqueued: int,
    verdict: Verdict,
    records: Mapping[str, JobRecord],
    executions: Executions,
    tail: EventsTail | None,
    drained_at: float,
) -> dict[str, Any]:
    """Assemble the result; `ok` is False when anything was lost or an invariant broke."""
    problems = verdict.problems + run.problems
    times = sorted(
        r.finished_on for r in records.values() if r.state == "completed" and r.finished_on
    )
    start = run.started_at
    faults = []
    for f in run.faults:
        f.recovery_s = recovery_time(times, f.at, start)
        faults.append(
            {
                "kind": f.kind,
                "at_s": round(f.at - start, 3),
                "pid": f.pid,
                "lifted_after_s": _r(None if f.ended is None else f.ended - f.at),
                "recovery_s": f.recovery_s,
                **f.detail,
            }
        )
    known = [f.recovery_s for f in run.faults if f.recovery_s is not None]
    dup = duplicates(executions.started, executions.processed)
    stall, stall_job = max_stall(executions.started, tail.stalled_ts if tail else {})
    again, again_job = max_redelivery(executions.started)
    last = times[-1] if times else drained_at
    result: dict[str, Any] = {
        "scenario": run.scenario,
        "ok": not problems and not verdict.lost_ids,
        "seed": run.seed,
        "jobs": run.jobs,
        "enqueued": enqueued,
        "completed": verdict.completed,
        "failed": verdict.failed,
        "lost": len(verdict.lost_ids),
        "duplicates": {
            "count": dup.duplicates,
            "jobs": dup.duplicate_jobs,
            "rate": round(dup.duplicate_jobs / enqueued, 6) if enqueued else 0.0,
        },
        "redelivered": {"jobs": dup.redelivered_jobs, "extra_starts": dup.extra_starts},
        # completed after at least one failed attempt (a crashed sandbox child, for one)
        "retried_jobs": sum(
            1 for r in records.values() if r.state == "completed" and r.attempts_made > 0
        ),
        "max_stalled_s": round(stall, 3),
        "max_stalled_job": stall_job,
        "max_redelivery_s": round(again, 3),
        "max_redelivery_job": again_job,
        "recovery_s": max(known) if known else None,
        "faults": faults,
        "duration_s": round(last - start, 3),
        "jobs_per_s": round(verdict.completed / (last - start), 1) if last > start else None,
        "peak_backlog": run.progress.peak_backlog,
        "failure_reasons": verdict.failure_reasons,
        "problems": problems,
        "lost_ids": sorted(verdict.lost_ids)[:20],
        "events": None
        if tail is None
        else {
            "read": tail.read,
            "missed": tail.missed,
            "stalled": sum(tail.stalled.values()),
            "completed": sum(tail.completed.values()),
        },
        "torn_ledger_lines": executions.torn_lines,
        "settings": {**asdict(run.settings), "server": run.target.describe()},
        "machine": machine(),
    }
    result.update({k: v for k, v in run.extra.items() if not k.startswith("_")})
    return result
