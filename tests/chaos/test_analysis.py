"""The ledger arithmetic and the invariant check, on hand-made ledgers (no server needed:
these are pure functions over timestamps and job records)."""

from __future__ import annotations

from pathlib import Path

import orjson

from glidemq.chaos.analysis import (
    completions_rerun,
    duplicates,
    max_redelivery,
    max_stall,
    pre_fault_rate,
    recovery_time,
)
from glidemq.chaos.collect import JobRecord, QueueLeftovers
from glidemq.chaos.invariants import check_invariants
from glidemq.chaos.ledger import Executions, read_executions


def _steady(start: float, end: float, per_s: int) -> list[float]:
    n = int((end - start) * per_s)
    return [start + i / per_s for i in range(n)]


def test_recovery_is_when_throughput_is_back_to_half() -> None:
    # 100/s for 3 s, nothing for 1.5 s after the fault at t=3, then 100/s again
    times = _steady(0, 3, 100) + _steady(4.5, 8, 100)
    assert pre_fault_rate(times, 3.0, 0.0) == 100.0
    rec = recovery_time(times, 3.0, 0.0)
    assert rec is not None
    # the first half-second window at half the rate starts 0.25 s before the resumption
    assert 1.2 <= rec <= 1.5


def test_recovery_is_zero_when_throughput_never_halves() -> None:
    times = _steady(0, 3, 100) + _steady(3, 6, 70)
    assert recovery_time(times, 3.0, 0.0) == 0.0


def test_recovery_unknown_without_history_or_without_comeback() -> None:
    assert recovery_time(_steady(0, 3, 100), 0.2, 0.0) is None  # no pre-fault window
    assert recovery_time(_steady(0, 3, 100), 3.0, 0.0) is None  # nothing after the fault


def test_duplicates_count_finished_runs_redeliveries_count_starts() -> None:
    started = {"a": [(1.0, 10), (3.0, 11)], "b": [(1.0, 10)], "c": [(1.0, 10), (2.5, 12)]}
    processed = {"a": [(1.1, 10), (3.1, 11)], "b": [(1.1, 10)], "c": [(2.6, 12)]}
    d = duplicates(started, processed)
    assert (d.duplicates, d.duplicate_jobs, d.redelivered_jobs, d.extra_starts) == (1, 1, 2, 2)
    assert max_redelivery(started) == (2.0, "a")
    assert max_redelivery({"b": [(1.0, 10)]}) == (0.0, None)


def test_stall_time_is_from_the_cut_off_start_to_the_stalled_event() -> None:
    started = {"a": [(1.0, 10), (9.0, 11)], "c": [(1.0, 10), (2.0, 12), (5.0, 13)]}
    # a: started at 1, handed back at 3 (then waited in the queue until 9)
    # c: cut off twice; the second time it sat from 2 to 4.5
    stalled = {"a": [3.0], "c": [1.8, 4.5]}
    assert max_stall(started, stalled) == (2.5, "c")
    assert max_stall(started, {}) == (0.0, None)


def _rec(job_id: str, state: str | None, **kw: object) -> JobRecord:
    base: dict[str, object] = {
        "finished_on": 5.0 if state in ("completed", "failed") else None,
        "returnvalue": {"id": job_id, "pid": 10} if state == "completed" else None,
        "failed_reason": "boom" if state == "failed" else None,
        "attempts_made": 0,
        "stalled_count": 0,
    }
    base.update(kw)
    return JobRecord(job_id=job_id, state=state, **base)  # type: ignore[arg-type]


def test_invariants_pass_on_a_clean_ledger() -> None:
    records = {"j0": _rec("j0", "completed"), "j1": _rec("j1", "failed")}
    left = QueueLeftovers(0, 0, 1, 1, frozenset({"j0"}))
    ex = Executions()
    ex.add_start("j0", 1.0, 10)
    ex.add_end("j0", 1.1, 10, "d")
    v = check_invariants(["j0", "j1"], records, left, None, ex)
    assert (v.completed, v.failed, v.lost_ids, v.problems) == (1, 1, [], [])
    assert v.failure_reasons == {"boom": 1}


def test_invariants_name_each_broken_rule() -> None:
    records = {
        "j0": _rec("j0", "completed"),
        "j1": _rec("j1", "failed", failed_reason=""),  # no reason
        "j2": _rec("j2", "active"),
        "j3": _rec("j3", None),
    }
    left = QueueLeftovers(2, 3, 2, 1, frozenset({"j0", "j2"}))
    ex = Executions()
    ex.add_start("j0", 1.0, 10)
    v = check_invariants(["j0", "j1", "j2", "j3"], records, left, None, ex)
    assert sorted(v.lost_ids) == ["j2", "j3"]
    assert v.stuck == {"active": 1, "missing": 1}
    text = "\n".join(v.problems)
    for expected in (
        "failed without a reason: j1",
        "2 entries still pending",
        "3 entries left in the stream",
        "hash says otherwise: j2",
        "completed set holds 2 jobs, the hashes say 1",
    ):
        assert expected in text, text


def test_an_empty_execution_ledger_while_jobs_completed_is_a_problem() -> None:
    # It used to skip the check of the results; now nothing shows the jobs ran.
    records = {"j0": _rec("j0", "completed"), "j1": _rec("j1", "completed")}
    left = QueueLeftovers(0, 0, 2, 0, frozenset({"j0", "j1"}))
    v = check_invariants(["j0", "j1"], records, left, None, Executions())
    assert any("execution ledger is empty" in p and "2 jobs completed" in p for p in v.problems)


def test_longest_gap_counts_from_the_storm_start_to_its_end() -> None:
    from glidemq.chaos.scenarios.kill_storm import longest_gap

    assert longest_gap([11.0, 12.0, 16.5, 17.0], 10.0, 18.0) == (4.5, 12.0)
    assert longest_gap([], 10.0, 12.0) == (2.0, 10.0)  # nothing completed at all
    assert longest_gap([5.0, 30.0], 10.0, 12.0) == (2.0, 10.0)  # outside the storm


def test_health_percentiles_and_soak_durations() -> None:
    import argparse

    import pytest

    from glidemq.chaos.scenarios.metrics_flood import percentile
    from glidemq.chaos.scenarios.soak import parse_duration

    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile([], 99)) == (50, 99, None)
    assert [parse_duration(t) for t in ("90", "90s", "2m", "1h", "1.5m")] == [90, 90, 120, 3600, 90]
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("20 minutes")


def test_a_run_directory_is_always_new(tmp_path: Path) -> None:
    from glidemq.chaos.lifecycle import fresh_run_dir

    first = fresh_run_dir(tmp_path / "w", "kill-workers-4")
    (first / "exec").mkdir()
    second = fresh_run_dir(tmp_path / "w", "kill-workers-4")
    assert (first.name, second.name) == ("kill-workers-4", "kill-workers-4-2")
    assert list(second.iterdir()) == []


def test_a_completion_rerun_is_a_start_after_the_worker_was_told_it_completed() -> None:
    acked = {"j1": [(10.0, 1)], "j2": [(10.0, 1)], "j3": [(10.0, 1), (12.0, 2)]}
    started = {
        "j1": [(9.0, 1)],  # ran once, acknowledged: fine
        "j2": [(9.0, 1), (9.5, 2)],  # ran twice, both before the acknowledgment: not a rerun
        "j3": [(9.0, 1), (11.0, 2)],  # started again after the acknowledgment: a rerun
        "j4": [(9.0, 1), (11.0, 2)],  # never acknowledged: an ordinary redelivery
    }
    assert completions_rerun(acked, started) == ["j3"]
    assert completions_rerun({}, started) == []


def test_acked_records_are_read_from_the_execution_files(tmp_path: Path) -> None:
    lines = [
        {"event": "started", "job_id": "j1", "ts": 1.0, "pid": 5, "run": "5-1"},
        {"event": "processed", "job_id": "j1", "ts": 1.1, "pid": 5, "digest": "0" * 16},
        {"event": "acked", "job_id": "j1", "ts": 1.2, "pid": 5, "run": "5-1"},
    ]
    (tmp_path / "exec-5.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    ex = read_executions(tmp_path)
    assert ex.acked["j1"] == [(1.2, 5)]
    assert "j2" not in ex.acked
