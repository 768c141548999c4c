"""The supervisor's restart policy (glidemq.runtime.restarts), step by step in time."""

from __future__ import annotations

import signal

from glidemq.runtime.restarts import CRASH_WINDOW, MAX_DELAY, RestartPolicy

KILLED = -signal.SIGKILL
SEGV = -signal.SIGSEGV


def test_ready_workers_killed_from_outside_are_always_replaced_at_once() -> None:
    p = RestartPolicy()
    for i in range(100):
        assert p.died(i % 3, ready=True, exit_code=KILLED, now=i * 0.1) == 0.0
        assert p.died(i % 3, ready=True, exit_code=-signal.SIGTERM, now=i * 0.1) == 0.0
    assert all(p.due(s) == 0.0 for s in range(3))


def test_crashes_back_off_per_slot_only() -> None:
    p = RestartPolicy()
    assert p.died(0, ready=True, exit_code=SEGV, now=10.0) == 0.0
    assert p.died(0, ready=True, exit_code=1, now=10.5) == 0.1
    assert p.died(0, ready=False, exit_code=KILLED, now=11.0) == 0.2
    assert p.due(0) == 11.2
    # another slot is not affected by slot 0's history
    assert p.died(1, ready=True, exit_code=SEGV, now=11.0) == 0.0
    assert p.due(1) == 11.0


def test_back_off_is_capped_and_forgets_old_crashes() -> None:
    p = RestartPolicy()
    delays = [p.died(0, ready=False, exit_code=3, now=float(i)) for i in range(20)]
    assert delays[:4] == [0.0, 0.1, 0.2, 0.4]
    assert max(delays) == MAX_DELAY
    later = 19 + CRASH_WINDOW + 1
    assert p.died(0, ready=False, exit_code=3, now=later) == 0.0


def test_boot_failures_count_in_a_row_until_a_worker_is_ready() -> None:
    p = RestartPolicy()
    assert [p.boot_failed() for _ in range(3)] == [1, 2, 3]
    p.ready()
    assert p.boot_failed() == 1
