"""The end-of-run invariants: nothing lost, nothing stuck, nothing completed twice.

Queue-wide checks next to the per-job outcomes (`glidemq.chaos.outcomes`): the queue's
structures must be clean at the end (no pending entries, no stream entries left), the
completed set must agree with the hashes, a failed job must say why, and the execution
ledger must not be empty while jobs completed (an empty ledger would make every check of
the results vacuous).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .collect import EventsTail, JobRecord, QueueLeftovers
from .ledger import Executions

__all__ = ["Verdict", "check_invariants"]

_EXAMPLES = 5


@dataclass
class Verdict:
    """Counts and the problems found; `lost_ids` are the enqueued jobs not finished."""

    completed: int = 0
    failed: int = 0
    lost_ids: list[str] = field(default_factory=list)
    stuck: dict[str, int] = field(default_factory=dict)
    failure_reasons: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _examples(items: Collection[str]) -> str:
    shown = sorted(items)[:_EXAMPLES]
    more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    return ", ".join(shown) + more


def check_invariants(
    enqueued: Collection[str],
    records: Mapping[str, JobRecord],
    leftovers: QueueLeftovers | None,
    tail: EventsTail | None,
    executions: Executions | None,
    *,
    removed: int = 0,
) -> Verdict:
    """Check the queue-wide invariants (the per-job outcomes are `glidemq.chaos.outcomes`);
    the verdict lists each broken one in words. `removed`: completed jobs whose hash the
    queue's retention removed (their records were read before; see `harvest`)."""
    v = Verdict()
    no_reason: list[str] = []
    for job_id in enqueued:
        rec = records.get(job_id)
        state = rec.state if rec else None
        if rec is not None and state == "completed":
            v.completed += 1
        elif rec is not None and state == "failed":
            v.failed += 1
            reason = rec.failed_reason or ""
            if not reason:
                no_reason.append(job_id)
            key = reason.splitlines()[0][:80] if reason else "(none)"
            v.failure_reasons[key] = v.failure_reasons.get(key, 0) + 1
        else:
            v.lost_ids.append(job_id)
            label = state or "missing"
            v.stuck[label] = v.stuck.get(label, 0) + 1
    if no_reason:
        v.problems.append(f"{len(no_reason)} jobs failed without a reason: {_examples(no_reason)}")
    if executions is not None and v.completed and not executions.ends:
        # no evidence of any execution: the check of the results cannot be skipped
        v.problems.append(
            f"the execution ledger is empty ({executions.files} files) while {v.completed} "
            "jobs completed: nothing shows they ran"
        )
    if leftovers is not None:
        if leftovers.pending:
            v.problems.append(f"{leftovers.pending} entries still pending in the consumer group")
        if leftovers.stream_length:
            v.problems.append(f"{leftovers.stream_length} entries left in the stream")
        not_completed = [
            i for i in leftovers.completed_ids if (r := records.get(i)) and r.state != "completed"
        ]
        if not_completed:
            v.problems.append(
                f"{len(not_completed)} jobs in the completed set whose hash says otherwise: "
                f"{_examples(not_completed)}"
            )
        if leftovers.completed_set != v.completed - removed:
            v.problems.append(
                f"the completed set holds {leftovers.completed_set} jobs, the hashes say "
                f"{v.completed - removed}"
                + (f" ({removed} more removed by retention)" if removed else "")
            )
    if tail is not None:
        # The events stream is capped and may have been trimmed before it was read, so it
        # only reports; "completed twice" is judged from the ledgers (outcomes.py).
        not_done = [j for j in tail.completed if (r := records.get(j)) and r.state != "completed"]
        if not_done:
            v.problems.append(
                f"{len(not_done)} jobs have a completed event but their hash says otherwise: "
                f"{_examples(not_done)}"
            )
    return v
