"""The one JSON object a run prints: counts, duplicates, stall and recovery times, faults."""

from __future__ import annotations

import os
import platform
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from .analysis import completions_rerun, duplicates, max_redelivery, max_stall, recovery_time
from .collect import EventsTail, JobRecord
from .context import ChaosRun
from .invariants import Verdict
from .ledger import Executions, Ledger
from .outcomes import LOST, STUCK, Outcomes

__all__ = ["JOBS_FILE", "VERDICT_FILE", "build_result", "machine", "write_records"]

VERDICT_FILE = "verdict.json"
JOBS_FILE = "jobs.jsonl"
_LISTED = 50  # how many jobs each listing of the result shows
_WORDS = {
    "failed_unexpected": "failed with a reason no injected fault explains",
    "lost": "lost (no hash, or a hash the queue can no longer deliver)",
    "completed_twice": "completed twice (a second execution's result replaced a kept one)",
    "stuck": "still waiting or active after the settle time",
    "completed_unverified": "completed with a result no execution in the ledger returned",
}


def write_records(directory: Path, result: Mapping[str, Any], ledger: Ledger) -> None:
    """Write the run's verdict (`verdict.json`) and job records (`jobs.jsonl`, the ledger
    the Spark report reads) into the run's directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / VERDICT_FILE).write_bytes(
        orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )
    ledger.write(directory / JOBS_FILE)


def _outcome_problems(outcomes: Outcomes, reexecutions_bound: int) -> list[str]:
    out = []
    for name, ids in outcomes.failing.items():
        shown = ", ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
        out.append(f"{name}: {len(ids)} jobs {_WORDS[name]}: {shown}")
    if outcomes.reexecutions > reexecutions_bound:
        out.append(
            f"reexecutions: {outcomes.reexecutions} re-executions over "
            f"{outcomes.reexecuted_jobs} jobs, above the bound of {reexecutions_bound} "
            "the injected faults explain"
        )
    return out


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
    outcomes: Outcomes,
    reexecutions_bound: int,
) -> dict[str, Any]:
    """Assemble the result; `ok` is False when a job's outcome is a failing one, the
    re-executions exceed their bound, or an invariant broke."""
    problems = _outcome_problems(outcomes, reexecutions_bound) + verdict.problems + run.problems
    rerun = completions_rerun(executions.acked, executions.started)
    durable = getattr(run.args, "durability", None) not in (None, "none")
    if rerun and durable:
        # the promise of durability: a completion a worker was told of is kept
        problems.append(
            f"completions_rerun: {len(rerun)} jobs ran again after their worker was told "
            f"the completion was stored, with --durability on: {', '.join(rerun[:20])}"
        )
    lost_ids = outcomes.ids(LOST)
    # an add that returned and left no hash at all: the acknowledged add itself was lost
    adds_lost = [j for j in lost_ids if outcomes.lost_states.get(j) == "missing"]
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
        "ok": not problems,
        "outcomes": outcomes.counts(),
        "reexecutions": {
            "count": outcomes.reexecutions,
            "jobs": outcomes.reexecuted_jobs,
            "bound": reexecutions_bound,
        },
        "predicted_failures": outcomes.predicted[:_LISTED],
        "unexpected_failures": outcomes.unexpected[:_LISTED],
        "completed_twice": outcomes.twice[:_LISTED],
        "stuck": dict(list(outcomes.stuck_states.items())[:_LISTED]),
        "failing": {name: ids[:_LISTED] for name, ids in outcomes.failing.items()},
        "seed": run.seed,
        "jobs": run.jobs,
        "enqueued": enqueued,
        "completed": verdict.completed,
        "failed": verdict.failed,
        "lost": len(lost_ids),
        # the acknowledged writes a failover can take, apart from the other losses
        "acknowledged_adds_lost": len(adds_lost),
        "acknowledged_adds_lost_ids": adds_lost[:20],
        "other_losses": len(lost_ids) - len(adds_lost) + len(outcomes.ids(STUCK)),
        # `acked`: jobs whose worker was told the completion was stored (the evidence)
        "completions_rerun": {
            "jobs": len(rerun),
            "ids": rerun[:20],
            "acked": len(executions.acked),
        },
        "durability": getattr(run.args, "durability", None) or "none",
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
        "lost_ids": outcomes.ids(LOST)[:20],
        # how the lost jobs were found: "missing" (no hash) or the state their hash claims
        "lost_states": dict(Counter(outcomes.lost_states.values())),
        "events": None
        if tail is None
        else {
            "read": tail.read,
            "missed": tail.missed,
            "stalled": sum(tail.stalled.values()),
            "completed": tail.completed.total,
        },
        "torn_ledger_lines": executions.torn_lines,
        "settings": {**asdict(run.settings), "server": run.target.describe()},
        "machine": machine(),
    }
    result.update({k: v for k, v in run.extra.items() if not k.startswith("_")})
    return result
