"""Slot accounting and the job table of a Worker (glidemq.worker.slots.Slots)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from glidemq.worker.slots import Slots


@dataclass
class _Job:
    id: str


@dataclass
class _Pool:
    accepting: bool = True
    pipeline_slots: int = 0


def test_free_counts_running_and_reserved_slots() -> None:
    slots: Slots[_Job] = Slots(4, prefetch=10)
    assert slots.free() == 4
    assert slots.reserve() == 4
    assert slots.free() == 0 and slots.reserved == 4
    slots.start(3)  # three of the four reserved slots got jobs
    slots.release(4)
    assert slots.free() == 1 and slots.running == 3 and slots.reserved == 0
    slots.end(2)
    assert slots.free() == 3


def test_reserve_takes_at_most_prefetch_most_and_free_and_never_goes_negative() -> None:
    slots: Slots[_Job] = Slots(8, prefetch=3)
    assert slots.reserve() == 3
    assert slots.reserve(1) == 1
    slots.start(8)  # more running than free (a fetch brought jobs after a close began)
    assert slots.free() < 0
    assert slots.reserve() == 0 and slots.reserved == 4


def test_a_sandbox_pool_adds_its_pipeline_slots_and_none_until_it_accepts() -> None:
    pool = _Pool(accepting=False, pipeline_slots=5)
    slots: Slots[_Job] = Slots(2, prefetch=100, extension=pool)
    assert slots.free() == 0 and slots.reserve() == 0
    pool.accepting = True
    assert slots.free() == 7
    assert slots.reserve() == 7


async def test_the_job_table_holds_drops_and_aborts_jobs() -> None:
    slots: Slots[_Job] = Slots(2, prefetch=2)
    never = asyncio.get_running_loop().create_future()
    task = asyncio.get_running_loop().create_task(asyncio.wait_for(never, None))
    slots.hold("1-0", _Job("a"), task)
    slots.hold("2-0", _Job("b"), None)  # waiting for its batch
    assert len(slots) == 2 and slots.holds("1-0")
    assert [e for e, _ in slots.jobs()] == ["1-0", "2-0"]
    assert slots.tasks() == [task]

    assert slots.abort("b", revoked=True) is False  # no task runs it
    assert slots.abort("a", revoked=True) is True
    await asyncio.gather(task, return_exceptions=True)
    assert slots.take_revoked("a") is True and slots.take_revoked("a") is False
    assert slots.holds("1-0")  # a revoked job stays until its failure is recorded

    slots.finish("1-0")
    slots.drop("2-0")
    assert len(slots) == 0 and not slots


async def test_a_lost_job_leaves_the_table_when_aborted() -> None:
    slots: Slots[_Job] = Slots(1, prefetch=1)
    task = asyncio.get_running_loop().create_task(asyncio.sleep(60))
    slots.hold("1-0", _Job("a"), task)
    assert slots.abort("a", revoked=False) is True
    await asyncio.gather(task, return_exceptions=True)
    assert not slots.holds("1-0") and not slots.is_revoked("a")


async def test_a_try_whose_failure_is_being_sent_is_left_out_of_heartbeats_and_aborts() -> None:
    # job a's first try (1-0) is failing, its retry (2-0) already runs on this worker
    slots: Slots[_Job] = Slots(2, prefetch=2)
    loop = asyncio.get_running_loop()
    failing = loop.create_task(asyncio.sleep(60))
    retry = loop.create_task(asyncio.sleep(60))
    slots.hold("1-0", _Job("a"), failing)
    slots.hold("2-0", _Job("a"), retry)
    slots.finishing("1-0")
    slots.finishing("9-0")  # not held: nothing to mark
    assert [e for e, _ in slots.renewable()] == ["2-0"]
    assert [e for e, _ in slots.jobs()] == ["1-0", "2-0"]
    assert slots.abort("a", revoked=False) is True  # the retry was taken over
    await asyncio.gather(retry, return_exceptions=True)
    assert retry.cancelled() and not failing.cancelled() and slots.holds("1-0")
    slots.drop("1-0")
    assert slots.renewable() == [] and not slots.holds("1-0")
    failing.cancel()
    await asyncio.gather(failing, return_exceptions=True)


async def test_wait_returns_on_wake_or_after_its_timeout() -> None:
    slots: Slots[_Job] = Slots(1, prefetch=1)
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, slots.wake)
    await asyncio.wait_for(slots.wait(), 5)
    await slots.wait(0.01)  # nobody wakes it: the timeout ends the wait


def test_a_suspect_is_reported_only_once_no_recorded_start_waits_before_it() -> None:
    """A suspect runs alone. Its start is reported only when nothing runs and no held job
    whose start is recorded waits (that one goes first); once reported, it is taken wherever
    it sits among the held jobs, so a recorded job held ahead of it cannot keep it, and with
    it the worker, waiting forever (glidemq/worker/starts.py)."""
    slots: Slots[_Job] = Slots(4, prefetch=4)
    slots.start(2)
    slots.hold_back("1-0", _Job("recorded"), 10.0)  # its start is recorded: it waits for a slot
    slots.hold_back("2-0", _Job("suspect"), 10.0, recorded=False, exact_only=True)
    assert slots.executing == 0
    assert slots.to_report(4, 0) == []  # the recorded job goes first
    assert slots.next_held() == ("1-0", _Job("recorded"))
    assert slots.to_report(4, 0) == []  # it runs now
    slots.end()
    slots.drop("1-0")
    assert slots.to_report(4, 0) == ["2-0", "suspect"] and slots.isolating()
    assert slots.take_suspect() is None  # the report is on its way
    slots.start()
    slots.hold_back("3-0", _Job("later"), 5.0)  # held after it, or back from a lease check
    slots.recorded(["2-0", "suspect"], True)
    assert slots.next_held() == ("2-0", _Job("suspect"))  # oldest first here, and
    slots.hold_back("2-0", _Job("suspect"), 20.0)  # back behind "later" (its lease ran out)
    assert slots.take_suspect() == ("2-0", _Job("suspect"), 20.0)
    assert slots.executing == 1 and slots.isolating()
    assert slots.take_suspect() is None  # it runs: nothing else starts
    slots.ran("2-0")
    assert not slots.isolating()


def test_the_next_confirmation_is_due_when_the_oldest_young_run_reaches_the_age() -> None:
    # a run that began just after a confirmation timer was armed is confirmed when it is due,
    # not a whole period later (a death in between would leave its start unsure)
    from glidemq.timing.clock import use_monotonic

    now = [100.0]
    use_monotonic(lambda: now[0])
    try:
        slots: Slots[_Job] = Slots(4, prefetch=4)
        assert slots.next_confirm_in(0.005) is None
        slots.began("1-0")
        now[0] = 100.004
        slots.began("2-0")
        assert abs((slots.next_confirm_in(0.005) or 0) - 0.001) < 1e-9  # 1-0 is due first
        now[0] = 100.006  # 1-0 is due, 2-0 is not
        assert abs((slots.next_confirm_in(0.005) or 0) - 0.003) < 1e-9
        now[0] = 100.02
        assert slots.next_confirm_in(0.005) is None  # both due: the next call confirms them
    finally:
        use_monotonic(None)
