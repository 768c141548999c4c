"""The end-of-run invariants: nothing lost, nothing stuck, nothing completed twice.

For every enqueued job the hash must say `completed` (with the processor's return value for
that very job, and a `finishedOn`) or `failed` with a reason. Anything else after the drain
deadline is *lost* (no hash, or stuck in waiting/active/delayed). Separately, the queue's
structures must be clean (no pending entries, no stream entries left), the events stream
must not show a job completed twice, and the processors' own ledger must show every
completed job was run by the process its result names.
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
) -> Verdict:
    """Check every invariant; the verdict lists each broken one in words."""
    v = Verdict()
    bad_result: list[str] = []
    no_reason: list[str] = []
    wrong_pid: list[str] = []
    for job_id in enqueued:
        rec = records.get(job_id)
        state = rec.state if rec else None
        if rec is not None and state == "completed":
            v.completed += 1
            rv = rec.returnvalue
            if not (isinstance(rv, dict) and rv.get("id") == job_id) or rec.finished_on is None:
                bad_result.append(job_id)
            elif executions is not None and executions.started:
                runs = executions.started.get(job_id, [])
                if rec.result_pid not in {pid for _, pid in runs}:
                    wrong_pid.append(job_id)
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
    if v.lost_ids:
        where = ", ".join(f"{n} {s}" for s, n in sorted(v.stuck.items()))
        v.problems.append(f"{len(v.lost_ids)} jobs lost ({where}): {_examples(v.lost_ids)}")
    if bad_result:
        v.problems.append(
            f"{len(bad_result)} jobs completed without their own result: {_examples(bad_result)}"
        )
    if no_reason:
        v.problems.append(f"{len(no_reason)} jobs failed without a reason: {_examples(no_reason)}")
    if wrong_pid:
        v.problems.append(
            f"{len(wrong_pid)} jobs completed with a result from a process the ledger never "
            f"saw run them: {_examples(wrong_pid)}"
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
        if leftovers.completed_set != v.completed:
            v.problems.append(
                f"the completed set holds {leftovers.completed_set} jobs, the hashes say "
                f"{v.completed}"
            )
    if tail is not None:
        twice = [j for j, n in tail.completed.items() if n > 1]
        if twice:
            v.problems.append(f"{len(twice)} jobs completed twice (events): {_examples(twice)}")
        not_done = [j for j in tail.completed if (r := records.get(j)) and r.state != "completed"]
        if not_done:
            v.problems.append(
                f"{len(not_done)} jobs have a completed event but their hash says otherwise: "
                f"{_examples(not_done)}"
            )
    return v
