"""A soak's million jobs must fit in the chaos process: the ledger spools its events to
disk, and the executions and the job records are kept per job in flat arrays. These tests
read a large ledger and assert on what stays in memory (bytes per job, events held), and
that nothing the verdict reads was lost on the way (no server: pure data structures)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import orjson

from glidemq.chaos.app import result_digest
from glidemq.chaos.collect import JobRecord, JobRecords
from glidemq.chaos.ledger import End, Executions, JobCounts, Ledger, read_executions

N = 20_000


def _result(i: int, pid: int) -> dict[str, object]:
    return {"id": f"j{i}", "pid": pid, "run": f"{pid}-{i}"}


def _write_exec(directory: Path) -> None:
    """Two processes' ledgers: every job started and processed once; every 100th job
    started a second time on the other process (a re-execution), and one torn line."""
    directory.mkdir()
    with open(directory / "exec-1.jsonl", "wb") as a, open(directory / "exec-2.jsonl", "wb") as b:
        for i in range(N):
            for event, ts in (("started", 10.0 + i), ("processed", 10.5 + i)):
                e = {"event": event, "job_id": f"j{i}", "ts": ts, "pid": 1, "run": f"1-{i}"}
                if event == "processed":
                    e["digest"] = result_digest(_result(i, 1))
                a.write(orjson.dumps(e) + b"\n")
            if i % 100 == 0:
                e = {"event": "started", "job_id": f"j{i}", "ts": 5.0 + i, "pid": 2, "run": "x"}
                b.write(orjson.dumps(e) + b"\n")
        b.write(b'{"event": "start')  # cut off by a SIGKILL


def test_a_large_execution_ledger_stays_compact(tmp_path: Path) -> None:
    _write_exec(tmp_path / "exec")
    ledger = Ledger("r", spool=tmp_path / "spool.jsonl")
    tracemalloc.start()
    try:
        ex = read_executions(tmp_path / "exec", sink=ledger)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # flat arrays: 2 tables x 25 bytes a job, at most doubled by growth; the 1 % of jobs
    # run twice sit in a dict
    assert ex.nbytes() <= 2 * 2 * 25 * N + 2 * 25 * 1024
    assert ex.spilled() == N // 100
    assert held < 200 * N, f"{held / N:.0f} bytes a job"
    # every event went to the spool file, none is held in memory
    assert ledger.held == 0
    assert sum(1 for _ in ledger.events()) == 2 * N + N // 100
    # and nothing the verdict reads was lost
    assert (ex.files, ex.torn_lines, len(ex.started), len(ex.ends)) == (2, 1, N, N)
    assert ex.started["j100"] == [(105.0, 2), (110.0, 1)]  # sorted by time
    assert ex.started["j101"] == [(111.0, 1)]
    assert ex.ends["j7"] == [End(17.5, 1, result_digest(_result(7, 1)))]
    assert ex.processed["j7"] == [(17.5, 1)]
    assert "j20000" not in ex.started and ex.started.get("zz") is None
    ledger.close()
    assert not (tmp_path / "spool.jsonl").exists()


def test_other_ids_and_odd_digests_are_kept_too() -> None:
    ex = Executions()
    ex.add_start("order-7", 1.0, 3)
    ex.add_end("order-7", 2.0, 3, "not-a-digest")
    ex.add_end("j3", 2.0, 3, None)
    ex.add_end("j3", 1.0, 4, "00000000000000ff")
    assert ex.started["order-7"] == [(1.0, 3)]
    assert ex.ends["order-7"] == [End(2.0, 3, "not-a-digest")]
    assert ex.ends["j3"] == [End(1.0, 4, "00000000000000ff"), End(2.0, 3, None)]
    assert sorted(ex.ends) == ["j3", "order-7"] and len(ex.ends) == 2


def test_job_records_keep_a_few_dozen_bytes_per_job() -> None:
    tracemalloc.start()
    try:
        records = JobRecords()
        for i in range(N):
            if i % 1000 == 7:
                rec = JobRecord(f"j{i}", "failed", 3.0, None, "boom", 3, 1)
            else:
                rec = JobRecord(f"j{i}", "completed", 2.0 + i, _result(i, 9), None, 0, 0)
            records.put(rec)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert records.nbytes() <= 2 * 40 * N
    assert held < 120 * N, f"{held / N:.0f} bytes a job"
    assert len(records) == N
    done = records["j5"]
    assert (done.state, done.finished_on, done.result_own, done.result_pid) == (
        "completed",
        7.0,
        True,
        9,
    )
    assert done.result_digest == result_digest(_result(5, 9))
    failed = records["j7"]
    assert (failed.state, failed.failed_reason, failed.attempts_made, failed.stalled_count) == (
        "failed",
        "boom",
        3,
        1,
    )
    assert failed.result_digest is None and not failed.result_own


def test_job_records_missing_hashes_other_ids_and_foreign_results() -> None:
    records = JobRecords()
    records.put(JobRecord("j2", None, None, None, None, 0, 0))  # no hash
    records.put(JobRecord("order-1", "active", None, None, None, 1, 0))
    records.put(JobRecord("j4", "completed", 1.0, {"id": "j5", "pid": 1}, None, 0, 0))
    records.put(JobRecord("j6", "completed", 1.0, "raw text", None, 0, 0))
    assert records["j2"].state is None and records["order-1"].state == "active"
    assert not records["j4"].result_own  # another job's result
    assert not records["j6"].result_own and records["j6"].result_digest is not None
    assert sorted(records) == ["j2", "j4", "j6", "order-1"] and len(records) == 4
    assert records.get("j3") is None
    records.put(JobRecord("j2", "waiting", None, None, None, 0, 0))  # read again
    assert records["j2"].state == "waiting" and len(records) == 4


def test_job_counts() -> None:
    counts = JobCounts()
    for job in ("j1", "j1", "j900", "x"):
        counts.add(job)
    assert (counts["j1"], counts["j900"], counts["x"], counts["j2"], counts.total) == (
        2,
        1,
        1,
        0,
        4,
    )
    assert list(counts) == ["j1", "j900", "x"]
