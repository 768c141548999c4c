"""`glidemq-bench locust` end to end (Locust headless, request events per call), and the
committed CI baseline that `glidemq-bench gate` uses by default."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from glidemq.bench.cli import CI_BASELINE
from glidemq.bench.harness import _METRIC, PROFILES, make_record, scenario_key

ROOT = Path(__file__).resolve().parents[2]


def test_locust_command_reports_add_and_add_and_wait(tmp_path: Path) -> None:
    prefix = tmp_path / "locust"
    done = subprocess.run(
        [
            sys.executable, "-m", "glidemq.bench.cli", "locust", "--users", "4",
            "--spawn-rate", "4", "--seconds", "3", "--csv", str(prefix),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with open(f"{prefix}_stats.csv", newline="") as fh:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(fh)}
    for name in ("add", "add_and_wait"):  # Queue.add_and_wait exists in this glidemq
        row = rows[("glidemq", name)]
        assert int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0, row


def _ci_keys() -> set[str]:
    return {scenario_key(make_record("glidemq", p, 0, {"jobs": p.jobs})) for p in PROFILES["ci"]}


def test_committed_ci_baseline_covers_the_ci_profile() -> None:
    data = json.loads(CI_BASELINE.read_text())
    assert data["profile"] == "ci"
    assert set(data["ratios"]) == _ci_keys()
    assert all(ratio > 0 for ratio in data["ratios"].values())


def test_gate_judges_against_the_committed_baseline_by_default(tmp_path: Path) -> None:
    baseline = json.loads(CI_BASELINE.read_text())["ratios"]
    lines = []
    for params in PROFILES["ci"]:
        key = scenario_key(make_record("glidemq", params, 0, {"jobs": params.jobs}))
        metric, _ = _METRIC[params.scenario]
        for system, value in (("glidemq", baseline[key]), ("bullmq", 1.0)):
            result: dict[str, Any] = {"jobs": params.jobs, "seconds": 1.0}
            if metric == "jobs_per_s":
                result["seconds"] = params.jobs / value
            else:
                result[metric] = value
            lines.append(json.dumps(make_record(system, params, 0, result)))
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "glidemq.bench.cli", "gate", "--results", str(records)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"gate passed: {len(baseline)} scenarios" in done.stdout
