"""The per-job outcomes on hand-made evidence (no server: `classify` is a pure function of
the producer's ids, the execution ledger and the final job records)."""

from __future__ import annotations

from glidemq.chaos.app import result_digest
from glidemq.chaos.collect import JobRecord
from glidemq.chaos.ledger import Executions
from glidemq.chaos.outcomes import FaultMark, Prediction, classify


def _result(job_id: str, pid: int, n: int) -> dict[str, object]:
    return {"id": job_id, "pid": pid, "run": f"{pid}-{n}"}


def _ran(
    ex: Executions,
    job_id: str,
    pid: int,
    n: int,
    ts: float,
    *,
    ended: bool = True,
    ended_by: int | None = None,
) -> None:
    ex.add_start(job_id, ts, pid)
    if ended:
        ex.add_end(job_id, ts + 0.01, ended_by or pid, result_digest(_result(job_id, pid, n)))


def _done(job_id: str, pid: int, n: int) -> JobRecord:
    return JobRecord(job_id, "completed", 9.0, _result(job_id, pid, n), None, 0, 0)


def _failed(job_id: str, reason: str) -> JobRecord:
    return JobRecord(job_id, "failed", 9.0, None, reason, 1, 0)


def _state(job_id: str, state: str | None) -> JobRecord:
    return JobRecord(job_id, state, None, None, None, 0, 0)


def test_each_job_gets_its_outcome() -> None:
    ex = Executions()
    _ran(ex, "j0", 10, 1, 1.0)  # once
    _ran(ex, "j1", 10, 2, 1.0, ended=False)  # cut off by the kill of pid 10
    _ran(ex, "j1", 11, 1, 3.0)
    # its result was not kept, and nothing explains why (it ended on pid 14, not killed)
    _ran(ex, "j2", 10, 3, 1.0, ended_by=14)
    _ran(ex, "j2", 11, 2, 3.0)
    _ran(ex, "j3", 12, 1, 1.0, ended=False)
    _ran(ex, "j9", 11, 3, 1.0)  # a result no one kept, for j8's "unverified"
    crash = Prediction(r"killed by signal SIGKILL", ("sigkill-child",), "a crash fails a run")
    records = {
        "j0": _done("j0", 10, 1),
        "j1": _done("j1", 11, 1),
        "j2": _done("j2", 11, 2),
        "j3": _failed("j3", "sandbox child (pid 12) was killed by signal SIGKILL (9)"),
        "j4": _failed("j4", "ValueError: boom"),
        "j5": _state("j5", None),  # hash gone
        "j6": _state("j6", "waiting"),  # waiting but in no stream: lost
        "j7": _state("j7", "waiting"),  # waiting in the stream: stuck
        "j8": _done("j8", 13, 1),  # no execution returned this
    }
    faults = [
        FaultMark("sigkill-worker", 2.0, pids=frozenset({10})),
        FaultMark("sigkill-child", 2.0, pids=frozenset({12})),
    ]
    out = classify(
        [f"j{i}" for i in range(9)], records, ex, {"j7"}, faults=faults, predictions=[crash]
    )
    assert out.by_job == {
        "j0": "completed_once",
        "j1": "completed_reexecuted",
        "j2": "completed_twice",
        "j3": "failed_predicted",
        "j4": "failed_unexpected",
        "j5": "lost",
        "j6": "lost",
        "j7": "stuck",
        "j8": "completed_unverified",
    }
    assert out.reexecutions == 2 and out.reexecuted_jobs == 2
    assert out.predicted == [
        {
            "job_id": "j3",
            "reason": "sandbox child (pid 12) was killed by signal SIGKILL (9)",
            "because": "a crash fails a run",
        }
    ]
    assert out.unexpected == [{"job_id": "j4", "reason": "ValueError: boom"}]
    assert out.failing == {
        "failed_unexpected": ["j4"],
        "lost": ["j5", "j6"],
        "completed_twice": ["j2"],
        "stuck": ["j7"],
        "completed_unverified": ["j8"],
    }


def test_a_dropped_result_is_explained_by_a_hurt_process_a_global_fault_or_the_log() -> None:
    ex = Executions()
    _ran(ex, "j0", 10, 1, 1.0)
    _ran(ex, "j0", 11, 1, 3.0)
    records = {"j0": _done("j0", 11, 1)}
    # pid 10's result was dropped: killed, a server fault around then, or logged as refused
    for kw in (
        {"faults": [FaultMark("sigstop-worker", 2.0, pids=frozenset({10}))]},
        {"faults": [FaultMark("sigkill-server", 2.0, 3.0, hits_everything=True)]},
        {"stale": {"j0"}},
    ):
        out = classify(["j0"], records, ex, set(), **kw)  # type: ignore[arg-type]
        assert out.by_job == {"j0": "completed_reexecuted"}, kw
    # a server fault long after it does not explain it
    far = [FaultMark("sigkill-server", 60.0, 61.0, hits_everything=True)]
    assert classify(["j0"], records, ex, set(), faults=far).by_job == {"j0": "completed_twice"}


def test_a_failure_is_predicted_only_when_its_fault_was_injected() -> None:
    ex = Executions()
    _ran(ex, "j0", 12, 1, 1.0, ended=False)
    records = {"j0": _failed("j0", "sandbox child (pid 12) was killed by signal SIGKILL (9)")}
    crash = Prediction(r"killed by signal SIGKILL", ("sigkill-child",), "a crash fails a run")
    assert classify(["j0"], records, ex, set(), predictions=[crash]).by_job == {
        "j0": "failed_unexpected"
    }
