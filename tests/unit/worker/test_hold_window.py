"""The hold window's policy (glidemq/worker/hold.py) and how glidemq-run passes it on."""

from __future__ import annotations

import time
from typing import Any

import pytest

from glidemq.processor import ProcessorSpec
from glidemq.runtime.config import UsageError, parse_config
from glidemq.runtime.worker_process import _worker_options
from glidemq.worker.fetcher import InOrder
from glidemq.worker.hold import HoldWindow, default_max_held
from glidemq.worker.slots import Slots


def test_the_default_cap_is_the_concurrency_at_least_256() -> None:
    # docs/USAGE.md, the Worker options table: `max_held` None = concurrency, at least 256.
    assert [default_max_held(c) for c in (1, 10, 256, 300)] == [256, 256, 256, 300]


def test_a_worker_holds_256_very_short_jobs_by_default_and_fewer_longer_ones() -> None:
    window = HoldWindow(capacity=1, window=0.02, depth=default_max_held(1))
    window.started()
    window.timed(0.00005)  # 0.05 ms: 20 ms of work is 400 runs, the cap is 256
    assert window.pipeline_slots == 256
    for _ in range(80):
        window.timed(0.001)  # 1 ms runs: 20 ms of work is 20 runs
    assert window.pipeline_slots == 20


def test_nothing_is_held_before_a_run_was_timed() -> None:
    window = HoldWindow(capacity=1, window=0.02, depth=8)
    window.started()
    assert window.pipeline_slots == 0


def test_short_runs_fill_the_depth_and_long_runs_empty_it() -> None:
    window = HoldWindow(capacity=2, window=0.02, depth=8)
    window.started()
    window.timed(0.0001)
    assert window.pipeline_slots == 8
    for _ in range(40):
        window.timed(0.5)  # runs ten times longer than the window
    assert window.limit == 0 and window.pipeline_slots == 0


def test_the_budget_is_a_window_of_work_for_every_slot() -> None:
    window = HoldWindow(capacity=4, window=0.02, depth=100)
    window.started()
    window.timed(0.01)  # 4 slots finish 8 jobs of 10 ms in 20 ms
    assert window.pipeline_slots == 8


def test_an_idle_or_stuck_worker_holds_nothing() -> None:
    window = HoldWindow(capacity=1, window=0.01, depth=8)
    window.timed(0.0001)
    assert window.stuck() and window.pipeline_slots == 0  # nothing started yet
    window.started()
    assert not window.stuck() and window.pipeline_slots == 8
    time.sleep(0.02)
    assert window.stuck() and window.pipeline_slots == 0


def test_glidemq_run_passes_the_hold_window_on() -> None:
    spec = ProcessorSpec(lambda job: None)
    cfg = parse_config(["app:work", "--hold-window", "0"], env={})
    assert _worker_options(cfg, spec).hold_window == 0
    cfg = parse_config(["app:work"], env={"GLIDEMQ_HOLD_WINDOW": "35"})
    assert _worker_options(cfg, spec).hold_window == 35
    assert _worker_options(parse_config(["app:work"], env={}), spec).hold_window == 20


def test_glidemq_run_refuses_a_negative_hold_window(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_config(["app:work", "--hold-window", "-5"], env={})
    assert exc.value.code == 2
    assert "--hold-window" in capsys.readouterr().err
    with pytest.raises(UsageError, match="hold-window"):
        parse_config(["app:work"], env={"GLIDEMQ_HOLD_WINDOW": "-5"})


def test_runs_timed_as_zero_or_denormal_keep_the_depth() -> None:
    # uvloop's clock moves in whole milliseconds: short runs were once timed as 0 s, and an
    # average that decayed towards 0 overflowed the budget (int(inf)) and failed jobs.
    window = HoldWindow(capacity=50, window=0.02, depth=64)
    window.timed(0.5)
    for _ in range(20_000):
        window.timed(0.0)
    window.timed(5e-324)
    assert window.limit == 64


def test_in_order_starts_replies_in_the_order_their_fetches_were_sent() -> None:
    started: list[list[str]] = []
    slots: Slots[Any] = Slots(capacity=10, prefetch=10)
    sent: list[float] = []

    def start(flat: list[str], at: float, rec: Any) -> None:
        started.append(flat)
        sent.append(at)

    order = InOrder(start, slots)
    tickets = [order.ticket() for _ in range(3)]
    for _ in tickets:
        assert slots.reserve(2) == 2
    order.deliver(tickets[2], ["c"], 2, 3.0)
    order.deliver(tickets[1], ["b"], 2, 2.0)
    assert started == [] and slots.reserved == 6  # waiting for the first fetch
    order.deliver(tickets[0], ["a"], 2, 1.0)
    assert started == [["a"], ["b"], ["c"]] and slots.reserved == 0
    assert sent == [1.0, 2.0, 3.0]  # each reply keeps its own send time (its jobs' lease)


def test_in_order_releases_the_slots_of_a_reply_whose_start_failed() -> None:
    slots: Slots[Any] = Slots(capacity=4, prefetch=4)

    def explode(flat: list[Any], sent: float, rec: Any) -> None:
        raise RuntimeError("boom")

    order = InOrder(explode, slots)
    ticket = order.ticket()
    slots.reserve(3)
    with pytest.raises(RuntimeError):
        order.deliver(ticket, ["x"], 3, 0.0)
    assert slots.reserved == 0
