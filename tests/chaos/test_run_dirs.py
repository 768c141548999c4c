"""Each run writes into a directory of its own: a --workdir holding earlier runs is
refused unless --resume, and with --resume the new run gets a new directory, so ledgers
never merge. Every run leaves its verdict and job records there."""

from __future__ import annotations

from pathlib import Path

import orjson

from .conftest import Runner

JOBS = 200
FLAGS = ("--jobs", JOBS, "--seed", 4, "--faults", 0, "--procs", 1, "--job-ms", 1)


def test_the_same_command_twice_in_one_workdir_never_merges_ledgers(
    chaos: Runner, tmp_path: Path
) -> None:
    work = tmp_path / "shared"
    first = chaos("kill-workers", *FLAGS, workdir=work)
    assert first.code == 0 and first.result["ok"], first.summary()
    again = chaos("kill-workers", *FLAGS, workdir=work)
    assert again.code == 2 and again.result == {}, again.summary()
    assert "is not empty" in again.stderr and "--resume" in again.stderr
    resumed = chaos("kill-workers", *FLAGS, "--resume", workdir=work)
    r = resumed.result
    assert resumed.code == 0 and r["ok"], resumed.summary()
    # the second run saw only its own executions: one each, no duplicates
    assert r["outcomes"]["completed_once"] == JOBS and r["duplicates"]["count"] == 0
    assert r["reexecutions"]["count"] == 0
    runs = sorted(p.name for p in work.iterdir())
    assert runs == ["kill-workers-4", "kill-workers-4-2"]
    for name in runs:
        verdict = orjson.loads((work / name / "verdict.json").read_bytes())
        assert verdict["enqueued"] == JOBS and verdict["ok"] is True
        lines = (work / name / "jobs.jsonl").read_bytes().splitlines()
        events = [orjson.loads(line) for line in lines]
        finals = [e for e in events if e["event"] == "completed"]
        assert len(finals) == JOBS and all(e["outcome"] == "completed_once" for e in finals)
        assert sum(e["event"] == "enqueued" for e in events) == JOBS


def test_crash_caused_failures_are_listed_as_predicted_with_their_reasons(chaos: Runner) -> None:
    # One attempt per job: every job a killed sandbox child was running fails for good.
    out = chaos("sandbox-crash", "--attempts", 1, "--jobs", 300, "--seed", 7)
    r = out.result
    assert out.code == 0 and r["ok"] is True, out.summary()
    assert r["failed"] >= 1, out.summary()  # at least one kill hit a running job
    assert r["outcomes"]["failed_predicted"] == r["failed"]
    assert r["outcomes"]["failed_unexpected"] == 0 and r["failing"] == {}
    listed = r["predicted_failures"]
    assert len(listed) == r["failed"]
    for entry in listed:
        assert "was killed by signal SIGKILL" in entry["reason"], entry
        assert "sandbox child" in entry["because"], entry
