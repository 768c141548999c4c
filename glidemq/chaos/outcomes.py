"""One outcome per job, from evidence the queue did not write.

The evidence: the producer's ledger (ids whose add returned), the processors' own
append-only execution ledger (a start and an end record per execution, the end with the
digest of the result it returned) and the final state of the job's hash. The queue's own
bookkeeping (events stream, counters) is not trusted for the verdict: it is what is tested.

Outcomes, one per enqueued job:

- `completed_once`: completed, its kept result is the one its only execution returned;
- `completed_reexecuted`: completed after more than one execution, every earlier one
  explained by a fault (its process was hurt, a server or network fault was on, or its
  worker logged that the late result was refused);
- `failed_predicted`: failed with a reason one of the scenario's faults causes (listed
  with the reason and why);
- `failed_unexpected`: failed with a reason no injected fault explains;
- `lost`: no hash, or a hash the queue can no longer deliver (not finished, and neither in
  the stream nor in the scheduled set);
- `completed_twice`: an execution ran to the end and returned a result that was not kept,
  and nothing explains why it was dropped: the job was completed twice;
- `stuck`: still waiting, active or scheduled after the settle time;
- `completed_unverified`: the hash says completed but no execution in the ledger returned
  the result it keeps (or the result is another job's).

The run fails on any of the last five.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .collect import JobRecord
from .ledger import End, Executions

__all__ = [
    "FAILING",
    "OUTCOMES",
    "FaultMark",
    "Outcomes",
    "Prediction",
    "classify",
]

COMPLETED_ONCE = "completed_once"
COMPLETED_REEXECUTED = "completed_reexecuted"
FAILED_PREDICTED = "failed_predicted"
FAILED_UNEXPECTED = "failed_unexpected"
LOST = "lost"
COMPLETED_TWICE = "completed_twice"
STUCK = "stuck"
UNVERIFIED = "completed_unverified"

OUTCOMES: tuple[str, ...] = (
    COMPLETED_ONCE,
    COMPLETED_REEXECUTED,
    FAILED_PREDICTED,
    FAILED_UNEXPECTED,
    LOST,
    COMPLETED_TWICE,
    STUCK,
    UNVERIFIED,
)
FAILING: tuple[str, ...] = (FAILED_UNEXPECTED, LOST, COMPLETED_TWICE, STUCK, UNVERIFIED)

_UNFINISHED = ("waiting", "active", "delayed", "prioritized", "scheduled", "waiting-children")


@dataclass(frozen=True)
class Prediction:
    """A failure the scenario's faults may cause: a regular expression searched in the
    job's failure reason, the fault kinds that cause it, and why (shown in the verdict)."""

    pattern: str
    kinds: tuple[str, ...]
    because: str

    def matches(self, reason: str) -> bool:
        return re.search(self.pattern, reason) is not None


@dataclass(frozen=True)
class FaultMark:
    """What the verdict needs of an injected fault: its kind, when it was on, and the
    processes it hurt, or `hits_everything` for a server or network fault."""

    kind: str
    at: float
    ended: float | None = None
    pids: frozenset[int] = frozenset()
    hits_everything: bool = False


@dataclass
class Outcomes:
    """The outcome of every job, with the numbers and examples the result shows."""

    by_job: dict[str, str] = field(default_factory=dict)
    reexecutions: int = 0
    reexecuted_jobs: int = 0
    predicted: list[dict[str, Any]] = field(default_factory=list)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    twice: list[dict[str, Any]] = field(default_factory=list)
    stuck_states: dict[str, str] = field(default_factory=dict)
    lost_states: dict[str, str] = field(default_factory=dict)  # "missing": no hash at all

    def counts(self) -> dict[str, int]:
        c = Counter(self.by_job.values())
        return {name: c.get(name, 0) for name in OUTCOMES}

    def ids(self, outcome: str) -> list[str]:
        return sorted((j for j, o in self.by_job.items() if o == outcome), key=_natural)

    @property
    def failing(self) -> dict[str, list[str]]:
        """Failing outcome -> its job ids (only the outcomes that occurred)."""
        out = {}
        for name in FAILING:
            ids = self.ids(name)
            if ids:
                out[name] = ids
        return out


def _natural(job_id: str) -> tuple[int, str]:
    digits = job_id.lstrip("j")
    return (int(digits), job_id) if digits.isdigit() else (1 << 62, job_id)


def _explained(
    end: End, job_id: str, faults: Sequence[FaultMark], stale: Collection[str], slack_s: float
) -> str | None:
    """Why an execution's result was not kept, or None when nothing explains it."""
    if job_id in stale:
        return "its worker logged the late result as refused"
    for f in faults:
        if f.pids and end.pid in f.pids:
            return f"its process was hit by {f.kind}"
        if f.hits_everything:
            lo = f.at - slack_s
            hi = (f.ended if f.ended is not None else f.at) + slack_s
            if lo <= end.ts <= hi:
                return f"it ended while {f.kind} was on"
    return None


def classify(
    enqueued: Iterable[str],
    records: Mapping[str, JobRecord],
    executions: Executions,
    in_queue: Collection[str],
    *,
    faults: Sequence[FaultMark] = (),
    predictions: Sequence[Prediction] = (),
    stale: Collection[str] = (),
    slack_s: float = 5.0,
) -> Outcomes:
    """Give every enqueued job one outcome. `in_queue`: ids the queue can still deliver
    (in its stream or its scheduled set); `stale`: ids whose late result a worker logged as
    refused; `slack_s`: how long around a server or network fault an execution's result
    may be lost to it (lock duration plus stall recovery plus slack)."""
    out = Outcomes()
    kinds = {f.kind: f.at for f in sorted(faults, key=lambda f: f.at, reverse=True)}
    for job_id in enqueued:
        rec = records.get(job_id)
        starts = executions.started.get(job_id, [])
        extra = max(0, len(starts) - 1)
        if extra:
            out.reexecutions += extra
            out.reexecuted_jobs += 1
        state = rec.state if rec is not None else None
        if rec is None or state is None:
            out.by_job[job_id] = LOST
            out.lost_states[job_id] = "missing"
            continue
        if state == "completed":
            out.by_job[job_id] = _completed(job_id, rec, executions, faults, stale, slack_s, out)
        elif state == "failed":
            reason = rec.failed_reason or "(no reason)"
            first = reason.splitlines()[0][:200]
            match = next(
                (
                    p
                    for p in predictions
                    if p.matches(reason)
                    and any(k in kinds and (rec.finished_on or 0) >= kinds[k] - 1 for k in p.kinds)
                ),
                None,
            )
            if match is not None:
                out.by_job[job_id] = FAILED_PREDICTED
                out.predicted.append({"job_id": job_id, "reason": first, "because": match.because})
            else:
                out.by_job[job_id] = FAILED_UNEXPECTED
                out.unexpected.append({"job_id": job_id, "reason": first})
        elif job_id in in_queue or state == "active":
            out.by_job[job_id] = STUCK
            out.stuck_states[job_id] = state
        else:
            out.by_job[job_id] = LOST
            out.lost_states[job_id] = state
    for listing in (out.predicted, out.unexpected, out.twice):
        listing.sort(key=lambda e: _natural(str(e["job_id"])))
    return out


def _completed(
    job_id: str,
    rec: JobRecord,
    executions: Executions,
    faults: Sequence[FaultMark],
    stale: Collection[str],
    slack_s: float,
    out: Outcomes,
) -> str:
    if not rec.result_own or rec.finished_on is None:
        return UNVERIFIED
    kept = rec.result_digest
    ends = executions.ends.get(job_id, [])
    if not any(e.digest == kept for e in ends):
        return UNVERIFIED
    unexplained = [
        e
        for e in ends
        if e.digest != kept and _explained(e, job_id, faults, stale, slack_s) is None
    ]
    if unexplained:
        out.twice.append(
            {
                "job_id": job_id,
                "ends": len(ends),
                "pids": sorted({e.pid for e in ends}),
            }
        )
        return COMPLETED_TWICE
    starts = executions.started.get(job_id, [])
    return COMPLETED_REEXECUTED if len(starts) > 1 or len(ends) > 1 else COMPLETED_ONCE
