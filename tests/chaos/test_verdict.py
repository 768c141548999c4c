"""The CLI's verdict: exit 1 with the lost jobs named when a run loses jobs; `all` runs
what exists and lists what it skipped and why."""

from __future__ import annotations

from .conftest import Runner


def test_jobs_not_finished_by_the_drain_deadline_are_stuck_and_exit_1(chaos: Runner) -> None:
    # No time to drain: the fleet is stopped while most jobs still wait. The verdict must
    # notice every one of them: still in the queue, so stuck (not lost).
    flags = "--faults 0 --job-ms 50 --procs 1 --drain-timeout 0"
    out = chaos("kill-workers", "--jobs", 500, "--seed", 3, *flags.split())
    r = out.result
    assert out.code == 1, out.summary()
    assert r["ok"] is False
    stuck = r["outcomes"]["stuck"]
    assert stuck > 0 and r["lost"] == 0 and stuck + r["completed"] + r["failed"] == 500
    assert len(r["failing"]["stuck"]) == min(stuck, 50)
    assert all(i.startswith("j") for i in r["failing"]["stuck"])
    assert any(p.startswith(f"stuck: {stuck} jobs") for p in r["problems"]), r["problems"]
    assert any("drain deadline" in p for p in r["problems"]), r["problems"]


def test_all_runs_the_rest_and_reports_skipped(chaos: Runner) -> None:
    skip = ["kill-workers", "hang-worker", "sandbox-crash", "server-restart", "kill-storm"]
    skip += ["memory-kill", "metrics-flood", "aof-restart", "soak"]
    args: list[str | int] = ["all", "--jobs", 100, "--seed", 5]
    for name in [*skip, "failover", "network"]:  # the cluster ones are slow to start
        args += ["--skip", name]
    out = chaos(*args)
    r = out.result
    assert out.code == 0, out.summary()
    assert r["scenario"] == "all" and r["ok"] is True and r["lost"] == 0
    assert [run["scenario"] for run in r["runs"]] == ["backlog"]
    assert r["runs"][0]["completed"] == 100
    skipped = {s["scenario"]: s["reason"] for s in r["skipped"]}
    assert all(skipped[name] == "left out with --skip" for name in skip)
    # left out, or not in this build: either way listed with a reason
    assert skipped["failover"] and skipped["network"]
    assert "planted" not in skipped  # a self-test of the verdict, never part of `all`
