"""The worker log's limit on repeats: at most BURST lines of one kind per window, the rest
counted and told in one line when the window is over (or at a flush)."""

from __future__ import annotations

import logging

import pytest

from glidemq.worker.report import Limiter


def test_repeats_past_the_burst_are_counted_and_told_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    limiter = Limiter(burst=3, window=10.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="glidemq.worker")
    passed = [limiter.allow("boom", "failures of job 'send' (ValueError)") for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    assert limiter.allow("other", "other failures")  # another kind has its own window
    limiter.flush()
    assert caplog.records == []  # the window is not over yet
    now[0] = 10.5
    limiter.flush()
    (told,) = caplog.records
    assert told.getMessage() == (
        "glidemq: 7 more failures of job 'send' (ValueError) in 10 s, not logged one by one"
    )
    assert told.glidemq == {  # type: ignore[attr-defined]
        "event": "repeated",
        "count": 7,
        "about": "failures of job 'send' (ValueError)",
    }
    assert limiter.allow("boom", "failures of job 'send' (ValueError)")  # a new window


def test_a_flush_of_everything_tells_open_windows_too(caplog: pytest.LogCaptureFixture) -> None:
    limiter = Limiter(burst=1, window=60.0, clock=lambda: 0.0)
    caplog.set_level(logging.WARNING, logger="glidemq.worker")
    assert [limiter.allow("k", "things") for _ in range(3)] == [True, False, False]
    limiter.flush(everything=True)
    assert [r.getMessage() for r in caplog.records] == [
        "glidemq: 2 more things in 60 s, not logged one by one"
    ]
