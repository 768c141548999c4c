"""The short soak: about 2 minutes and 20,000 jobs on the 3+3 cluster with every kind of
fault, through the real CLI. The verdict must pass (nothing lost, nothing completed twice,
every failure predicted, re-executions within their bound), every fault kind must have
been injected, and the memory samples and the records for the report must be there.

It is the longest test of the suite (the soak's 2 minutes, plus the cluster's start and
the drain: 3-5 minutes on a busy 2-core machine)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from glidemq.chaos.scenarios.soak import KINDS

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
