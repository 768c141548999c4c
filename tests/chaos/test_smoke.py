"""Each chaos scenario once through the real CLI at 500 jobs: nothing lost, the faults
happened, and the numbers the result reports are there and plausible."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import ChaosOutcome, Runner

JOBS = 500
SEED = 11
LOCK_S = 1.5  # the scenarios' default --lock-duration
STALLED_S = 0.5  # and --stalled-interval
SLACK_S = 3.0  # a busy 2-core machine


def _check_common(out: ChaosOutcome, scenario: str, faults: int) -> None:
    r = out.result
    assert out.code == 0, out.summary()
    assert r["scenario"] == scenario and r["ok"] is True, out.summary()
    assert (r["enqueued"], r["lost"], r["lost_ids"], r["problems"]) == (JOBS, 0, [], [])
    assert r["completed"] + r["failed"] == JOBS
    assert r["seed"] == SEED
    assert len(r["faults"]) == faults, out.summary()
    assert r["duplicates"]["count"] >= 0 and 0 <= r["duplicates"]["rate"] <= 1
    # the events stream agrees, one completion each (when the tail kept up with it)
    assert r["events"]["completed"] <= r["completed"]
    if r["events"]["missed"] == 0:
        assert r["events"]["completed"] == r["completed"]
    assert r["fleet_exit_code"] == 0
    assert f"glidemq-chaos {scenario}" in out.stderr  # progress on stderr


def test_kill_workers(chaos: Runner) -> None:
    out = chaos("kill-workers", "--jobs", JOBS, "--seed", SEED)
    _check_common(out, "kill-workers", 3)
    r = out.result
    assert r["completed"] == JOBS
    assert {f["kind"] for f in r["faults"]} == {"sigkill-worker"}
    # the killed processes held jobs; those ran again once their locks expired
    assert r["redelivered"]["jobs"] > 0
    assert 0 < r["max_stalled_s"] <= LOCK_S + STALLED_S + SLACK_S


def test_hang_worker(chaos: Runner) -> None:
    out = chaos("hang-worker", "--jobs", JOBS, "--seed", SEED)
    _check_common(out, "hang-worker", 1)
    r = out.result
    timeout = r["settings"]["heartbeat_timeout"]
    (killed_after,) = r["hung_killed_after_s"]
    # heartbeat deadline, then SIGTERM (pending while stopped), SIGKILL 3 s later
    assert timeout <= killed_after <= timeout + 3 + SLACK_S
    assert r["workers_started"] == r["settings"]["procs"] + 1  # one replacement
    assert r["completed"] == JOBS
    assert r["max_stalled_s"] <= LOCK_S + STALLED_S + SLACK_S


def test_hang_worker_resumed_late_completions_are_dropped(chaos: Runner) -> None:
    flags = "--procs 2 --concurrency 4 --heartbeat-timeout 10 --resume-after 3"
    out = chaos("hang-worker", "--jobs", 300, "--seed", SEED, *flags.split())
    r = out.result
    assert out.code == 0 and r["lost"] == 0 and r["completed"] == 300, out.summary()
    assert r["hung_killed_after_s"] == []
    # every job the frozen process held ran again elsewhere. Resumed, it learns of the
    # takeover from its heartbeat (it aborts those runs: nothing to report) or from its
    # completion (refused, one log line each), whichever reaches the server first: never
    # more refusals than re-run jobs, and none counted as a second completion
    assert r["stale_completions_logged"] <= r["reexecutions"]["count"], out.summary()
    assert r["completed_twice"] == [] and r["outcomes"]["completed_twice"] == 0
    assert r["events"]["completed"] <= 300


def test_sandbox_crash(chaos: Runner) -> None:
    out = chaos("sandbox-crash", "--jobs", JOBS, "--seed", SEED)
    _check_common(out, "sandbox-crash", 5)
    r = out.result
    assert r["settings"]["sandbox"] is True
    assert {f["kind"] for f in r["faults"]} == {"sigkill-sandbox-child"}
    assert r["worker_processes_started"] == r["settings"]["procs"]  # workers survived
    # a failure is a job hit on every one of its attempts: it must say why
    for reason in r["failure_reasons"]:
        assert "sandbox child" in reason or "killed" in reason, r["failure_reasons"]


def test_server_restart(chaos: Runner) -> None:
    out = chaos("server-restart", "--jobs", JOBS, "--seed", SEED)
    _check_common(out, "server-restart", 1)
    r = out.result
    assert r["settings"]["server"] == "aof"
    (fault,) = r["faults"]
    assert fault["kind"] == "sigkill-server"
    assert fault["lifted_after_s"] >= fault["down_s"]
    assert r["completed"] == JOBS


def test_backlog(chaos: Runner) -> None:
    out = chaos("backlog", "--jobs", JOBS, "--seed", SEED)
    _check_common(out, "backlog", 0)
    r = out.result
    assert r["completed"] == JOBS
    assert r["redelivered"]["jobs"] == 0 and r["duplicates"]["count"] == 0
    assert r["backlog_when_produced"] > 0 and r["peak_backlog"] > 0
    assert r["catch_up_s"] > 0 and r["produce_per_s"] > r["catch_up_per_s"]


@pytest.mark.parametrize("scenario", ["server-restart"])
def test_scenario_that_controls_the_server_refuses_url(chaos: Runner, scenario: str) -> None:
    out = chaos(scenario, "--jobs", 10, "--url", "valkey://127.0.0.1:1")
    assert out.code == 2
    assert "cannot run against --url" in out.stderr


def test_backlog_against_a_given_server(chaos: Runner, valkey_server: Any) -> None:
    out = chaos("backlog", "--jobs", 200, "--seed", SEED, "--url", valkey_server.url)
    r = out.result
    assert out.code == 0 and r["ok"] and r["completed"] == 200, out.summary()
    assert r["settings"]["server"] == "external"
    # the run's queue is taken away from a server it was lent
    assert valkey_server.cli("KEYS", f"glide:{{chaos-backlog-{SEED}-*") == ""
