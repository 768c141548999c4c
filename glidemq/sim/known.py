"""Defects the simulator finds on this code that are reported and being fixed elsewhere.

A violation that matches an entry here is printed as known (with the entry's reference)
and does not fail a run unless `--strict`. Each entry names the invariant and a narrow
condition, so that a new defect under the same invariant still fails. When the fix of an
entry is merged, delete the entry: its violations then fail again, and the test that
patches the fix out (tests/sim/test_reverts.py) proves the simulator still finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .facts import Facts, Violation

__all__ = ["KNOWN", "Known", "classify"]


@dataclass(frozen=True, slots=True)
class Known:
    key: str
    reference: str
    invariant: str
    matches: Callable[[Violation, Facts], bool]


def _always(v: Violation, f: Facts) -> bool:
    return True


def _after_group_change(v: Violation, f: Facts) -> bool:
    """A group start over the limit after the group's concurrency was changed."""
    key = v.detail.split(":", 1)[0].removeprefix("group ")
    return any(at <= v.t for at, _, _ in f.limits.get(key, []))


def _after_thaw(v: Violation, f: Facts) -> bool:
    """A start by a worker that was frozen less than a lock duration before it."""
    starts = [r for r in f.runs_of.get(v.job, []) if abs(r.start - v.t) < 1e-9]
    for run in starts:
        if any(0 <= v.t - t <= f.lock_s for t in f.thawed.get(run.worker, [])):
            return True
    return False


KNOWN: tuple[Known, ...] = (
    Known("held-stall-charge", "issue 44 item 1: held jobs charged stalls", "stall-limit", _always),
    Known(
        "freeze-held",
        "issue 44 item 2: a held job decided after a freeze",
        "start-without-hold",
        _after_thaw,
    ),
    Known(
        "freeze-held",
        "issue 44 item 2: a held job decided after a freeze",
        "rerun-without-loss",
        _after_thaw,
    ),
    Known(
        "freeze-held",
        "issue 44 item 2: a held job decided after a freeze",
        "completed-twice",
        _after_thaw,
    ),
    Known("edit-race", "issue 44 item 3: an edit races a fetch", "stale-edit", _always),
    Known(
        "group-change",
        "issue 44 item 4: a lowered group concurrency",
        "group-concurrency",
        _after_group_change,
    ),
)


def classify(violations: list[Violation], facts: Facts) -> list[Violation]:
    """The violations with `known` set for those that match an entry of KNOWN."""
    out = []
    for v in violations:
        for k in KNOWN:
            if k.invariant == v.invariant and k.matches(v, facts):
                v = Violation(v.invariant, v.job, v.t, v.detail, k.reference)
                break
        out.append(v)
    return out
