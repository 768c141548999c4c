"""Each fix of the past, patched out, is found by the simulator within its default budget of
seeds, and the seed that finds it holds the invariant once the fix is back.
(tests/sim/reverts.py lists them; add one there for each new fix.)"""

from __future__ import annotations

import pytest

from glidemq.sim import make_plan, run_plan
from glidemq.sim.known import FIXES
from glidemq.sim.known import fixed as has_fix
from glidemq.sim.revert import DEFAULT_BUDGET, hunt
from tests.sim.reverts import REVERTS, Revert


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: a hunt may run the whole budget of 200 seeds
@pytest.mark.parametrize("revert", REVERTS, ids=[r.fix for r in REVERTS])
def test_the_simulator_finds_the_defect_a_fix_removed(revert: Revert) -> None:
    if revert.needs is not None and not has_fix(revert.needs):
        pytest.skip(f"{revert.fix}: not in this code yet ({FIXES[revert.needs][0]})")
    with revert.applied():
        found = hunt(revert.invariant, range(DEFAULT_BUDGET), revert.faults)
    assert found is not None, f"{revert.fix} ({revert.what}): not found in {DEFAULT_BUDGET} seeds"
    fixed = run_plan(make_plan(found.seed, revert.faults))
    assert revert.invariant not in {v.invariant for v in fixed.violations}
