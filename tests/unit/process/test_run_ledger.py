"""The run ledger a worker process marks its runs in and its supervisor reads after the
process died (glidemq/process/ledger.py)."""

from __future__ import annotations

import os
import signal

from glidemq.process.ledger import RunLedger
from glidemq.runtime.reclaim import Holding


def test_marks_are_kept_until_their_run_ends() -> None:
    ledger = RunLedger(slots=8)
    a = ledger.begin("worker-a", "1-0")
    b = ledger.begin("worker-a", "2-0")
    ledger.begin("worker-b", "3-0")
    ledger.end(a)
    assert ledger.began() == {"worker-a": ["2-0"], "worker-b": ["3-0"]}
    ledger.end(b)
    ledger.begin("worker-a", "4-0")  # a freed slot is used again
    assert ledger.began() == {"worker-a": ["4-0"], "worker-b": ["3-0"]}


def test_the_supervisor_reads_what_a_killed_child_had_begun() -> None:
    ledger = RunLedger(slots=16)
    pid = os.fork()
    if pid == 0:  # the child: three runs begin, one ends, then it is killed outright
        marks = [ledger.begin("worker-x", f"{i}-0") for i in range(3)]
        ledger.end(marks[1])
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert ledger.began() == {"worker-x": ["0-0", "2-0"]}
    ledger.close()
    assert ledger.began() is None  # closed: nothing can be said any more


def test_a_run_without_room_makes_the_ledger_say_it_does_not_know() -> None:
    full = RunLedger(slots=2)
    assert full.begin("w", "1-0") >= 0 and full.begin("w", "2-0") >= 0
    assert full.begin("w", "3-0") == -1
    assert full.began() is None  # a run it could not mark may have begun

    long = RunLedger(slots=2)
    assert long.begin("w" * 200, "1-0") == -1
    long.end(-1)  # the mark of a run it could not note is harmless to end
    assert long.began() is None


def test_a_holding_carries_the_runs_begun_over_the_pipe() -> None:
    h = Holding("q", "glide", "worker-a", cause="killed", began=("1-0", "2-0"))
    assert Holding.from_wire(h.to_wire()) == h
    unknown = Holding("q", "glide", "worker-a")
    assert Holding.from_wire(unknown.to_wire()).began is None


def test_the_supervisor_gives_a_dead_childs_begun_runs_to_whoever_hands_its_jobs_back() -> None:
    import time

    from glidemq.client.connection import ConnectionOptions
    from glidemq.runtime.config import RuntimeConfig
    from glidemq.runtime.supervisor import ForkedProcess, Supervisor

    sup = Supervisor(RuntimeConfig(target="none:none", procs=1), ConnectionOptions())
    ledger = RunLedger(slots=8)
    ledger.begin("worker-a", "5-0")
    child = ForkedProcess(0, 4242, -1, 0, time.monotonic(), ready=True, ledger=ledger)
    child.holdings = [Holding("q", "glide", "worker-a"), Holding("r", "glide", "worker-b")]
    sup._on_exit(child, signal.SIGKILL)  # the wait status of a SIGKILLed process
    a, b = (sup.orphans[("glide", q, c)] for q, c in (("q", "worker-a"), ("r", "worker-b")))
    assert a.began == ("5-0",) and b.began == ()  # worker-b had begun nothing
    assert a.cause == "worker process killed by SIGKILL while running"
