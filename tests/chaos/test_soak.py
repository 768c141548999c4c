"""The short soak: about 2 minutes and 20,000 jobs on the 3+3 cluster with every kind of
fault, through the real CLI. The verdict must pass (nothing lost, nothing completed twice,
every failure predicted, re-executions within their bound), every fault kind must have
been injected, and the memory samples and the records for the report must be there.

It is the longest test of the suite (the soak's 2 minutes, plus the cluster's start and
the drain: 3-5 minutes on a busy 2-core machine)."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from glidemq.chaos.scenarios.soak import KINDS, Soak

from .conftest import Runner

JOBS = 20_000


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(1500)
def test_short_soak(chaos: Runner, tmp_path: Path) -> None:
    work = tmp_path / "soak"
    out = chaos("soak", "--duration", "2m", "--jobs", JOBS, "--seed", 5, timeout=1400, workdir=work)
    r = out.result
    assert "error" not in r, out.summary()
    assert all(r["soak"]["by_kind"][kind] >= 1 for kind in KINDS), r["soak"]
    assert r["enqueued"] == JOBS, out.summary()
    assert r["failing"] == {} and r["lost"] == 0, out.summary()
    assert r["outcomes"]["completed_twice"] == 0
    assert r["reexecutions"]["count"] <= r["reexecutions"]["bound"]
    assert out.code == 0 and r["ok"] is True, out.summary()
    memory = r["memory"]
    assert memory["worker_rss_max_mb"]["end"] <= memory["limit_mb"]
    assert memory["server_used_mb"]["end"] > 0 and len(r["memory_samples"]) >= 10
    # the verdict and the job records for the report are in the run's directory
    (run_dir,) = work.iterdir()
    assert orjson.loads((run_dir / "verdict.json").read_bytes())["ok"] is True
    events = [orjson.loads(x) for x in (run_dir / "jobs.jsonl").read_bytes().splitlines()]
    kinds = {e["kind"] for e in events if e["event"] == "recovery"}
    assert set(KINDS) <= kinds


class _Verdict:
    """What `Soak.check` reads and writes of a run: its size, flags and problems."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.args = argparse.Namespace(max_rss_growth=0.10)
        self.extra: dict[str, object] = {}
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(text)


def _samples(upto: int, step: int) -> list[dict[str, float]]:
    return [
        {"t_s": i, "done": i, "worker_rss_max_mb": 50.0, "worker_rss_mb": 150.0,
         "children_rss_mb": 900.0, "server_used_mb": 40.0}
        for i in range(0, upto + 1, step)
    ]  # fmt: skip


def test_memory_samples_that_stop_early_fail_the_soak() -> None:
    # A sampler that died a third of the way in once let a run call its memory flat.
    soak = Soak()
    soak.samples = _samples(360_000, 5_000)
    run = _Verdict(1_000_000)
    soak.check(run)  # type: ignore[arg-type]
    assert run.problems and "too few to judge" in run.problems[0]

    soak.samples = _samples(1_000_000, 5_000)
    run = _Verdict(1_000_000)
    soak.check(run)  # type: ignore[arg-type]
    assert run.problems == []
    assert run.extra["memory"]["worker_rss_max_mb"]["end"] == 50.0  # type: ignore[index]


def test_no_memory_samples_fail_the_soak() -> None:
    soak = Soak()
    run = _Verdict(20_000)
    soak.check(run)  # type: ignore[arg-type]
    assert run.problems, "a soak without memory samples must not pass"
