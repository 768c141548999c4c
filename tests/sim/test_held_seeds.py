"""Seeds the simulator found breaking held jobs and start reports, kept as regression tests.

Each plan is the seed's, shrunk where that was quick (`python -m glidemq.sim run --seed S
--shrink`); each broke its invariant on the code before its fix.
"""

from __future__ import annotations

import pytest

from glidemq.sim import make_plan, run_plan
from glidemq.sim.revert import lua_reverted, reverted

ALL = "crash,freeze,slow,lossy,reset,restart,stall,clock,block"


def _broken(plan: object) -> set[str]:
    result = run_plan(plan)  # type: ignore[arg-type]
    return {v.invariant for v in result.violations}


def test_a_start_report_answered_on_the_fetch_loops_call_starts_its_job() -> None:
    # 0a719af: a suspect's report went with fetch_now, which never said it was recorded
    plan = make_plan(7, faults=ALL).only(jobs=[32, 33, 34], actions=[0], faults=[])
    assert "liveness" not in _broken(plan)


def test_a_recorded_held_job_does_not_wait_for_a_suspect_held_before_it() -> None:
    # 49ee96f (1): next_held gave only the oldest held job, a suspect not reported yet
    plan = make_plan(113, faults=ALL).only(
        jobs=[2, 3, 15, 16, 17, 18, 19, 20, 27, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
              41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 56, 57],
        actions=[0, 2, 4, 5],
        faults=[0, 2, 4],
    )  # fmt: skip
    assert "liveness" not in _broken(plan)


@pytest.mark.parametrize(
    ("seed", "invariants"),
    [
        (59, {"liveness", "poison-job"}),  # 49ee96f (2): a suspect's report lost
        (94, {"start-without-hold", "completed-twice"}),  # 1675bbc: wait_for's own task
        (191, {"reclaimed-from-live-worker"}),  # 49ee96f (3): lost by job id, not entry
    ],
)
def test_seeds_of_held_jobs_hold(seed: int, invariants: set[str]) -> None:
    assert not invariants & _broken(make_plan(seed, faults=ALL))


# A fetch whose answer was lost (a reply lost or late, a connection reset) left its jobs in
# the worker's pending list, started as far as the server knew: stall recovery charged each
# (with max_stalled_count 0, failed it). Seed 4: a reply lost to a live worker; seed 239: the
# lost call arrived after its token was forgotten, on a connection the worker had replaced.
_TOMBSTONE = (
    "  if tok and #entries > 0 and forgotten(prefix, stream, entries, consumer, tok) then "
    "return end\n",
    "",
)


@pytest.mark.parametrize("seed", [4, 239])
def test_the_jobs_of_a_lost_fetch_are_not_charged(seed: int) -> None:
    assert "stall-limit" not in _broken(make_plan(seed))


def test_without_forgetting_lost_fetches_their_jobs_are_charged() -> None:
    with reverted("glidemq.worker.forget:LostFetches.lost", lambda *a, **k: None):
        assert "stall-limit" in _broken(make_plan(4))


def test_without_the_tombstone_a_late_try_of_a_forgotten_fetch_is_charged() -> None:
    with lua_reverted(_TOMBSTONE):
        assert "stall-limit" in _broken(make_plan(239))
