"""The records pipeline on the benchmark scenarios added after the first report: scenario
keys as the harness names them, their judged metrics, and the throughput-vs-processes table
and plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from glidemq.bench.harness import make_record, ratios
from glidemq.bench.jobrecords import write_parquet
from glidemq.bench.peer import ScenarioParams

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:Importing from 'glide:DeprecationWarning"),
]

PNG = b"\x89PNG\r\n\x1a\n"


def _records() -> list[dict[str, Any]]:
    runs: list[tuple[ScenarioParams, dict[str, dict[str, Any]]]] = []
    for procs, (g, b) in {1: (10_000, 8_000), 2: (18_000, 14_000), 8: (40_000, 20_000)}.items():
        params = ScenarioParams("procs", jobs=1000, concurrency=50, procs=procs)
        runs.append((params, {"glidemq": {"seconds": 1000 / g}, "bullmq": {"seconds": 1000 / b}}))
    runs += [
        (
            ScenarioParams("sandbox", jobs=1000, concurrency=8),
            {"glidemq": {"seconds": 0.1, "inprocess_jobs_per_s": 10_000.0},
             "bullmq": {"seconds": 0.3, "inprocess_jobs_per_s": 9_000.0}},
        ),
        (
            ScenarioParams("memory", jobs=1000, concurrency=100),
            {"glidemq": {"seconds": 1.0, "rss_peak_mb": 60.0},
             "bullmq": {"seconds": 1.0, "rss_peak_mb": 80.0}},
        ),
        (
            ScenarioParams("cpu", jobs=1000, concurrency=100),
            {"glidemq": {"seconds": 1.0, "cpu_us_per_job": 50.0},
             "bullmq": {"seconds": 1.0, "cpu_us_per_job": 100.0}},
        ),
        (
            ScenarioParams("batch", jobs=1000, concurrency=10, batch=50),
            {"glidemq": {"seconds": 0.05}, "bullmq": {"seconds": 0.1}},
        ),
        (
            ScenarioParams("cluster", jobs=1000, concurrency=50, queues=6),
            {"glidemq": {"seconds": 0.1}, "bullmq": {"seconds": 0.2}},
        ),
    ]  # fmt: skip
    out = []
    for params, sides in runs:
        for system, result in sides.items():
            out.append(make_record(system, params, 0, {"jobs": params.jobs, **result}))
    return out


def test_new_scenarios_keys_metrics_and_the_processes_plot(spark: Any, tmp_path: Path) -> None:
    from glidemq.spark import run_pipeline

    results = tmp_path / "results"
    results.mkdir()
    records = _records()
    (results / "records.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    # Per-job records beside them are not benchmark records: the pipeline leaves them alone.
    job = {"queue": "q", "job_id": "1", "enqueued_ms": 1.0, "started_ms": 2.0,
           "finished_ms": 3.0, "pid": 9}  # fmt: skip
    write_parquet([job], results / "jobs" / "glidemq-process.parquet", system="glidemq",
                  scenario="process", key="process c=1", rep=0)  # fmt: skip

    out = tmp_path / "report"
    tables = run_pipeline(results, out, spark=spark)
    by_key = {r["scenario_key"]: r for r in tables["bench_ratios"]}
    harness = ratios(records)
    assert set(by_key) == set(harness) == {
        "procs 1x c=50", "procs 2x c=50", "procs 8x c=50", "sandbox c=8", "memory c=100",
        "cpu c=100", "batch c=10 b=50", "cluster 6q c=50",
    }  # fmt: skip
    for key, row in by_key.items():
        assert row["ratio"] == pytest.approx(harness[key]["ratio"]), key
    assert by_key["memory c=100"]["metric"] == "rss_peak_mb"
    assert by_key["memory c=100"]["higher_is_better"] is False
    assert by_key["cpu c=100"]["ratio"] == pytest.approx(0.5)
    assert by_key["procs 8x c=50"]["ratio"] == pytest.approx(2.0)

    procs = {
        (r["system"], r["procs"]): r["median_jobs_per_s"] for r in tables["throughput_by_procs"]
    }
    assert procs[("glidemq", 8)] == pytest.approx(40_000) and len(procs) == 6
    png = (out / "plots" / "throughput_vs_procs.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 5_000
    report = (out / "report.md").read_text()
    assert "![throughput_vs_procs](plots/throughput_vs_procs.png)" in report
