"""The worker-side pacer of a sliding rate limit (glidemq.worker.limits.Pacer)."""

from __future__ import annotations

from glidemq import RateLimit
from glidemq.options.limits import SLIDING_MAX
from glidemq.worker.limits import Pacer


def test_the_pacer_makes_the_start_past_max_wait_for_the_window() -> None:
    pacer = Pacer(RateLimit(2, 1000))
    t0 = 100.0
    assert pacer.wait(t0) == 0
    pacer.record(t0)
    assert pacer.wait(t0) == 0
    pacer.record(t0 + 0.5)
    # the third start waits until the first leaves the window
    assert pacer.wait(t0 + 0.5) == 0.5
    pacer.record(t0 + 1.0)
    # the fourth until the second leaves it
    assert pacer.wait(t0 + 1.0) == 0.5
    assert pacer.wait(t0 + 2.0) == 0


def test_no_pacer_without_a_sliding_limit() -> None:
    assert Pacer.for_limit(None) is None
    assert Pacer.for_limit(RateLimit(SLIDING_MAX + 1, 1000)) is None
    assert Pacer.for_limit(RateLimit(5, 1000)) is not None
