"""Planted faults: one job broken behind the queue's back per run (the `planted`
self-test scenario, 150 jobs). The verdict must fail the run (exit 1) and name the right
category with the job's id, from its own evidence."""

from __future__ import annotations

import pytest

from .conftest import Runner

JOBS = 150


@pytest.mark.parametrize(
    ("plant", "category"),
    [
        ("hash-deleted", "lost"),
        ("stream-entry-deleted", "lost"),
        ("completed-twice", "completed_twice"),
        ("left-active", "stuck"),
        ("unexplained-failure", "failed_unexpected"),
    ],
)
def test_the_verdict_catches_a_planted_fault(chaos: Runner, plant: str, category: str) -> None:
    out = chaos("planted", "--plant", plant, "--jobs", JOBS, "--seed", 1, "--settle", 3)
    r = out.result
    assert out.code == 1 and r["ok"] is False, out.summary()
    victim = r["planted"]["job_id"]
    assert victim, out.summary()
    # exactly that job, in exactly that category; every other job completed once
    assert r["failing"] == {category: [victim]}, out.summary()
    assert r["outcomes"][category] == 1
    assert r["outcomes"]["completed_once"] == JOBS - 1, out.summary()
    assert any(p.startswith(f"{category}: 1 jobs") and victim in p for p in r["problems"])
    assert f"FAILED planted: {category}: 1 jobs" in out.stderr
    if plant == "hash-deleted":
        assert r["lost_states"] == {"missing": 1}
    elif plant == "stream-entry-deleted":
        assert r["lost_states"] == {"waiting": 1}  # a hash that nothing will deliver
