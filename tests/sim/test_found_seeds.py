"""Seeds of the 1,000- and 10,000-seed runs that broke an invariant, kept as regression
tests once their cause was fixed (the engine's, or a checker rule that did not yet allow for
what the run did; docs/SIMULATION.md, "What it found")."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from glidemq.sim import make_plan, run_plan


@pytest.mark.parametrize(
    ("seed", "invariant"),
    [
        # the client renewal's probe opened a real socket: in-process servers have none, so
        # the producer's signal task died and a suspended job waited for ever
        (9946, "liveness"),
        # global concurrency 1 at the end: the jobs left ran one at a time, past the bound
        (1390, "liveness"),
        # stall recovery's 'interrupted' of an at-most-once job is not a worker's outcome
        (263, "unrecorded-outcome"),
        # the worker was frozen from the server's record of its failure to the end
        (922, "unrecorded-outcome"),
    ],
)
def test_found_seeds_hold(seed: int, invariant: str) -> None:
    result = run_plan(make_plan(seed))
    assert invariant not in {v.invariant for v in result.violations}


def test_a_crashed_workers_runs_are_closed_without_awaiting_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # seed 466: a crashed worker's run, closed by the garbage collector mid-await, caught
    # GeneratorExit as a processor failure and awaited the failure call ("coroutine ignored
    # GeneratorExit"): a dropped task must run none of that
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    run_plan(make_plan(466))
    gc.collect()
    ignored = [u for u in seen if "GeneratorExit" in str(u.exc_value)]
    assert ignored == [], [str(u.exc_value) for u in ignored]
