"""Shrinking a failing seed: the fewest faults, actions and jobs that still break the same
invariant, and the regression test that replays them.

Faults and actions go one at a time; jobs by halves, then quarters, and so on, then one at a
time (delta debugging). Every try is a full deterministic run of the smaller plan, so what
is kept fails every time it is replayed.
"""

from __future__ import annotations

from collections.abc import Callable

from .behaviour import UserProcessor
from .plan import Plan
from .runner import Result, run_plan

__all__ = ["reproducer", "shrink"]


def _fails(invariant: str, app: UserProcessor | None) -> Callable[[Plan], bool]:
    def fails(plan: Plan) -> bool:
        result = run_plan(plan, app)
        return any(v.invariant == invariant for v in result.violations)

    return fails


def _drop_each(items: list[int], keep: Callable[[list[int]], bool]) -> list[int]:
    i = 0
    while i < len(items):
        fewer = items[:i] + items[i + 1 :]
        if keep(fewer):
            items = fewer
        else:
            i += 1
    return items


def _ddmin(items: list[int], keep: Callable[[list[int]], bool], budget: list[int]) -> list[int]:
    n = 2
    while len(items) >= 2 and budget[0] > 0:
        size = max(1, len(items) // n)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        for chunk in chunks:
            rest = [x for x in items if x not in chunk]
            budget[0] -= 1
            if rest and keep(rest):
                items, n = rest, max(2, n - 1)
                break
        else:
            if size == 1:
                break
            n = min(len(items), n * 2)
    return items


def shrink(
    plan: Plan,
    invariant: str,
    app: UserProcessor | None = None,
    max_runs: int = 300,
    progress: Callable[[str], None] | None = None,
) -> Plan:
    """A smaller plan of the same seed that still violates `invariant`."""
    fails = _fails(invariant, app)
    jobs = [j.n for j in plan.jobs]
    actions = [a.n for a in plan.actions]
    faults = [f.n for f in plan.faults]
    budget = [max_runs]

    def with_(j: list[int], a: list[int], f: list[int]) -> bool:
        budget[0] -= 1
        return budget[0] >= 0 and fails(plan.only(jobs=j, actions=a, faults=f))

    faults = _drop_each(faults, lambda f: with_(jobs, actions, f))
    actions = _drop_each(actions, lambda a: with_(jobs, a, faults))
    if progress is not None:
        progress(f"{len(faults)} faults, {len(actions)} actions; shrinking {len(jobs)} jobs")
    jobs = _ddmin(jobs, lambda j: with_(j, actions, faults), budget)
    if len(jobs) <= 12:
        jobs = _drop_each(jobs, lambda j: with_(j, actions, faults))
    return plan.only(jobs=jobs, actions=actions, faults=faults)


def reproducer(result: Result, invariant: str) -> str:
    """A regression test that replays `result`'s plan and asserts `invariant` holds."""
    name = invariant.replace("-", "_")
    return "\n".join(
        [
            "from glidemq.sim import make_plan, run_plan",
            "",
            "",
            f"def test_sim_seed_{result.seed}_{name}() -> None:",
            f"    plan = {result.plan.describe()}",
            "    result = run_plan(plan)",
            f"    assert {invariant!r} not in {{v.invariant for v in result.violations}}",
            "",
        ]
    )
