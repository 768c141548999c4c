"""The sandbox's queue depth is a time budget: about `pipeline_window` of work per child at
the recent run time, at most `pipeline` runs, one until a run has been timed, none in batch
mode or while runs are longer than the window."""

from __future__ import annotations

import pytest

from glidemq.sandbox import SandboxOptions
from glidemq.sandbox.prefetch_window import PrefetchWindow


def _pipeline(depth: int = 16, window: float = 0.02, size: int = 8) -> PrefetchWindow:
    return PrefetchWindow(SandboxOptions(pipeline=depth, pipeline_window=window), size, batch=False)


def test_one_queued_run_per_child_until_a_run_is_timed() -> None:
    p = _pipeline()
    assert (p.limit, p.max_slots) == (1, 128)


def test_short_runs_get_the_whole_depth() -> None:
    p = _pipeline()
    p.timed(0.0003)
    assert p.limit == 16


@pytest.mark.parametrize(("run", "limit"), [(0.005, 4), (0.0099, 2), (0.015, 1), (0.02, 1)])
def test_the_depth_holds_about_one_window_of_work(run: float, limit: int) -> None:
    p = _pipeline()
    p.timed(run)
    assert p.limit == limit


def test_runs_longer_than_the_window_turn_it_off_and_short_ones_back_on() -> None:
    p = _pipeline()
    p.timed(0.0003)
    for _ in range(3):
        p.timed(1.0)  # the moving average passes the window on the first one
    assert p.limit == 0
    for _ in range(60):
        p.timed(0.0)
    assert p.limit == 16


def test_no_pipelining_in_batch_mode_or_with_pipeline_0() -> None:
    batch = PrefetchWindow(SandboxOptions(), 8, batch=True)
    off = _pipeline(depth=0)
    for p in (batch, off):
        p.timed(0.0001)
        assert (p.depth, p.limit, p.max_slots) == (0, 0, 0)
