"""The event emitter: an `error` that nobody listens to is logged at WARNING, once and then
at most once a minute (a reconnect loop emits one per try), never dropped in silence; with
a listener it is the listener's, and nothing is logged."""

from __future__ import annotations

import logging

import pytest

from glidemq import emitter
from glidemq.emitter import Emitter
from glidemq.errors import ConnectionError


def _unheard(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "no 'error' listener" in r.getMessage()]


def test_an_error_nobody_listens_to_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    events = Emitter("worker of queue emails")
    with caplog.at_level(logging.WARNING, logger="glidemq"):
        for i in range(100):  # a reconnect loop failing a hundred times
            events.emit("error", ConnectionError(f"cannot connect, try {i}"))
    [record] = _unheard(caplog)
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "worker of queue emails" in text and "ConnectionError: cannot connect, try 0" in text


def test_after_the_quiet_period_it_says_how_many_were_not_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(emitter.time, "monotonic", lambda: now[0])
    events = Emitter("events of queue q")
    with caplog.at_level(logging.WARNING, logger="glidemq"):
        for _ in range(5):
            events.emit("error", ValueError("boom"))
        now[0] += emitter.UNHEARD_ERROR_EVERY_S
        events.emit("error", ValueError("again"))
    _, second = _unheard(caplog)
    assert "4 more since the last one" in second.getMessage()
    assert "again" in second.getMessage()


def test_a_listened_error_is_the_listeners_and_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = Emitter("worker of queue q")
    seen: list[BaseException] = []
    events.on("error", seen.append)
    with caplog.at_level(logging.WARNING, logger="glidemq"):
        events.emit("error", ValueError("boom"))
        events.emit("completed", "no listener: nothing to say")
    assert len(seen) == 1 and not _unheard(caplog)
