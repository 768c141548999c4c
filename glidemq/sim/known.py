"""Defects the simulator finds on this code that are reported and being fixed elsewhere.

A violation that matches an entry here is printed as known (with the entry's reference)
and does not fail a run unless `--strict`. Each entry names the invariant and a narrow
condition, so that a new defect under the same invariant still fails, and the fix that
removes it: `FIXES` detects each fix in the code (a symbol or a text of the library), and an
entry whose fix is present matches nothing, so a merged fix never hides a violation. Once
the fix is in, delete its entry (and its detector when no revert test uses it): the test
that patches the fix out (tests/sim/test_reverts.py) proves the simulator still finds it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ..client.functions import raw_library_source
from ..worker.worker import Worker
from .facts import Facts, Violation

__all__ = ["FIXES", "KNOWN", "Known", "classify", "fixed"]


def _lua_has(text: str) -> Callable[[], bool]:
    return lambda: text in raw_library_source()


def _run_checks_its_lease() -> bool:
    run = vars(Worker)["_run"]
    return "leased" in inspect.signature(run).parameters


FIXES: dict[str, tuple[str, Callable[[], bool]]] = {
    "held-stall-charge": (
        "stall recovery charges only runs that started (glidemq_reclaimStalled's "
        "MAX_UNCHARGED_RECLAIMS)",
        _lua_has("MAX_UNCHARGED_RECLAIMS"),
    ),
    "freeze-held": (
        "a job's lease is checked where its run begins (Worker._run(job, leased))",
        _run_checks_its_lease,
    ),
    "group-change": (
        "a reserved group slot is given back when the lowered limit is full (admitGroupJob)",
        _lua_has("The limit went down after this slot was handed out"),
    ),
}
"""Fixes of issue 44: key -> (what the fix is, whether the code has it). A known entry and a
revert test of tests/sim name one by its key (a revert test skips while its fix is absent,
as on a branch without it)."""


@cache
def fixed(key: str) -> bool:
    """Whether the fix `key` of FIXES is in the code."""
    return FIXES[key][1]()


@dataclass(frozen=True, slots=True)
class Known:
    key: str
    reference: str
    invariant: str
    matches: Callable[[Violation, Facts], bool]

    @property
    def active(self) -> bool:
        """False once its fix is in the code: then it matches nothing."""
        return self.key not in FIXES or not fixed(self.key)


KNOWN: tuple[Known, ...] = ()
"""Empty: the held-job, freeze and group-concurrency defects of issue 44 are fixed in this
code (their revert tests in tests/sim/reverts.py patch each fix out)."""


def classify(violations: list[Violation], facts: Facts) -> list[Violation]:
    """The violations with `known` set for those that match an entry of KNOWN, and for
    later violations of a job that broke a known defect (its consequences: a run that
    should not have started leaves the job's later runs unexplained)."""
    out = []
    first: dict[str, tuple[float, str]] = {}  # job -> (time, reference) of its known defect
    for v in violations:
        for k in KNOWN:
            if k.invariant == v.invariant and k.active and k.matches(v, facts):
                v = Violation(v.invariant, v.job, v.t, v.detail, k.reference)
                if v.job and (v.job not in first or v.t < first[v.job][0]):
                    first[v.job] = (v.t, k.reference)
                break
        out.append(v)
    for i, v in enumerate(out):
        cause = first.get(v.job) if v.job else None
        if not v.known and cause is not None and cause[0] <= v.t:
            out[i] = Violation(v.invariant, v.job, v.t, v.detail, f"{cause[1]} (follows from it)")
    return out
