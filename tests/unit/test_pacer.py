"""The worker-side pacer of a sliding rate limit (glidemq.limiting.Pacer)."""

from __future__ import annotations

from glidemq import RateLimit
from glidemq.limiting import Pacer
from glidemq.limits import SLIDING_MAX


def test_the_pacer_delays_the_start_past_max_to_the_end_of_the_window() -> None:
    pacer = Pacer(RateLimit(2, 1000))
    assert pacer.reserve() == 0
    assert pacer.reserve() == 0
    wait = pacer.reserve()  # the third start waits until the first leaves the window
    assert 0.9 < wait <= 1.0
    fourth = pacer.reserve()  # and the fourth until the second leaves it
    assert 0.9 < fourth <= 1.0


def test_no_pacer_without_a_sliding_limit() -> None:
    assert Pacer.for_limit(None) is None
    assert Pacer.for_limit(RateLimit(SLIDING_MAX + 1, 1000)) is None
    assert Pacer.for_limit(RateLimit(5, 1000)) is not None
