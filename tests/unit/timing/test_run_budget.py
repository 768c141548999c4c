"""The one time budget behind the hold window and the sandbox prefetch window."""

from __future__ import annotations

from glidemq.sandbox.prefetch_window import PrefetchWindow
from glidemq.sandbox.types import SandboxOptions
from glidemq.timing.run_budget import RunBudget
from glidemq.worker.hold import HoldWindow


def test_short_runs_get_the_whole_depth_long_ones_none() -> None:
    budget = RunBudget(0.1, 8, slots=2, cold=1)
    assert budget.limit == 1 and budget.run_time is None  # cold: not timed yet
    budget.timed(0.001)
    assert budget.limit == 8  # 0.2 s of work for 2 slots is 200 runs: capped at the depth
    for _ in range(60):
        budget.timed(0.05)
    assert budget.limit == 4  # 0.2 s / 0.05 s
    for _ in range(60):
        budget.timed(1.0)
    assert budget.limit == 0  # runs longer than the window: nothing waits behind them


def test_both_windows_follow_the_same_budget() -> None:
    hold = HoldWindow(capacity=1, window=0.1, depth=16)
    prefetch = PrefetchWindow(SandboxOptions(pipeline=16, pipeline_window=0.1), 1, False)
    assert (hold.limit, prefetch.limit) == (0, 1)  # their cold starts differ on purpose
    for seconds in (0.01, 0.02, 0.03, 0.5, 0.004):
        hold.timed(seconds)
        prefetch.timed(seconds)
        assert hold.limit == prefetch.limit
