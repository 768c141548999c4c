"""The benchmark regression gate: exact on known ratios, and end to end on real runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glidemq.bench.cli import gate_check
from glidemq.bench.harness import make_record, ratios
from glidemq.bench.peer import ScenarioParams

ROOT = Path(__file__).resolve().parents[2]


def _summary(glidemq: float, bullmq: float, scenario: str = "process") -> dict[str, dict]:
    params = ScenarioParams(scenario, jobs=1000)
    recs = []
    for system, rate in (("glidemq", glidemq), ("bullmq", bullmq)):
        recs.append(make_record(system, params, 0, {"jobs": 1000, "seconds": 1000 / rate}))
    return ratios(recs)


def test_gate_passes_within_tolerance_and_names_the_fallen_scenario() -> None:
    baseline = {"process c=100": 2.0}
    assert gate_check(_summary(1900, 1000), baseline, 0.10) == []  # 1.9x >= 1.8x
    failures = gate_check(_summary(1700, 1000), baseline, 0.10)  # 1.7x < 1.8x
    assert len(failures) == 1 and failures[0].startswith("process c=100")


def test_gate_treats_latency_as_lower_is_better() -> None:
    params = ScenarioParams("latency", rate=1000)
    recs = [
        make_record("glidemq", params, 0, {"jobs": 10, "latencies_ms": [1.0] * 10}),
        make_record("bullmq", params, 0, {"jobs": 10, "latencies_ms": [2.0] * 10}),
    ]
    summary = ratios(recs)
    assert summary["latency 1000/s"]["ratio"] == 0.5
    assert gate_check(summary, {"latency 1000/s": 0.5}, 0.10) == []
    assert gate_check(summary, {"latency 1000/s": 0.4}, 0.10) != []  # 0.5 > 0.44


def test_gate_fails_when_a_baseline_scenario_was_not_measured() -> None:
    failures = gate_check(_summary(1000, 1000), {"add-bulk": 1.0}, 0.10)
    assert failures == ["add-bulk: not measured in this run"]


def _gate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "glidemq.bench.cli",
        "gate",
        "--profile",
        "ci",
        "--reps",
        "1",
        "--scale",
        "0.2",
        *args,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_gate_trips_on_a_planted_slowdown_and_passes_on_the_real_code(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the BullMQ side of the benchmark")
    baseline = tmp_path / "baseline.json"
    made = _gate(tmp_path, "--write-baseline", str(baseline))
    assert made.returncode == 0, made.stderr
    assert "process c=100" in json.loads(baseline.read_text())["ratios"]

    # The real code against a baseline it just measured: passes, with room for the noise
    # of a shared 2-core machine.
    real = _gate(tmp_path, "--baseline", str(baseline), "--tolerance", "0.6")
    assert real.returncode == 0, real.stdout + real.stderr

    # 3 ms of busy CPU per job: the process ratio collapses far beyond any noise.
    planted = _gate(
        tmp_path, "--baseline", str(baseline), "--tolerance", "0.6", "--plant-delay-us", "3000"
    )
    assert planted.returncode == 1, planted.stdout + planted.stderr
    assert "REGRESSION" in planted.stderr and "process c=100" in planted.stderr


def test_only_keeps_the_named_scenarios_in_profile_order() -> None:
    from glidemq.bench.cli import select_scenarios
    from glidemq.bench.harness import PROFILES

    picked = select_scenarios(PROFILES["full"], "sandbox, process")
    assert [p.scenario for p in picked] == ["process"] * 4 + ["sandbox"]
    with pytest.raises(ValueError, match="choose from add-single"):
        select_scenarios(PROFILES["full"], "sandbox,nosuch")


def test_run_only_with_an_unknown_scenario_exits_2_naming_the_valid_ones() -> None:
    cmd = [sys.executable, "-m", "glidemq.bench.cli", "run", "--profile", "ci", "--only", "nosuch"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--only: nosuch not in this profile; choose from add-bulk" in done.stderr
