"""The records pipeline on a small committed set of records, checked against hand arithmetic.

tests/spark/data/results holds:
- records-a.jsonl: process c=10 and c=100, latency, add-bulk; both systems, reps 0 and 1
  (add-bulk rep 0 only);
- records-b.jsonl: a second run with add-bulk rep 0 — pairs never cross files;
- ledger-chaos.jsonl: two chaos runs; `kill-worker` loses j5, completes j3 twice, sees x9
  that was never enqueued, has one fault at 100.5; its last line is cut off (dropped).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from glidemq.bench.harness import ratios

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:Importing from 'glide:DeprecationWarning"),
]

RESULTS = Path(__file__).parent / "data" / "results"
PNG = b"\x89PNG\r\n\x1a\n"


def _by(rows: list[dict[str, Any]], *keys: str) -> dict[Any, dict[str, Any]]:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):  # the cut-off last line
            out.append(orjson.loads(line))
    return out


def _check_bench(tables: dict[str, list[dict[str, Any]]]) -> None:
    ratio = _by(tables["bench_ratios"], "scenario_key")
    assert set(ratio) == {"add-bulk", "latency 1000/s", "process c=10", "process c=100"}
    c10 = ratio["process c=10"]
    assert c10["metric"] == "jobs_per_s" and c10["higher_is_better"] is True
    assert c10["pairs"] == 2
    # pairs: 20000/16000 = 1.25 and 22000/20000 = 1.10
    assert c10["ratio"] == pytest.approx((1.25 + 1.10) / 2)
    assert (c10["min_ratio"], c10["max_ratio"]) == pytest.approx((1.10, 1.25))
    assert (c10["median_glidemq"], c10["median_bullmq"]) == (21_000, 18_000)
    # 30000/20000 = 1.5 and 27500/25000 = 1.1
    assert ratio["process c=100"]["ratio"] == pytest.approx(1.3)
    lat = ratio["latency 1000/s"]
    assert lat["metric"] == "p99_ms" and lat["higher_is_better"] is False
    assert lat["ratio"] == pytest.approx((4.0 / 5.0 + 3.0 / 6.0) / 2)
    # add-bulk rep 0 is in both files: two pairs (40000/32000, 36000/30000), never crossed
    bulk = ratio["add-bulk"]
    assert bulk["pairs"] == 2
    assert bulk["ratio"] == pytest.approx((1.25 + 1.2) / 2)

    runs = _by(tables["bench_runs"], "scenario_key", "system")
    g10 = runs[("process c=10", "glidemq")]
    assert g10["runs"] == 2
    assert g10["median_jobs_per_s"] == 21_000
    assert (g10["min_jobs_per_s"], g10["max_jobs_per_s"]) == (20_000, 22_000)
    assert g10["median_server_us_per_job"] == pytest.approx((30 + 32) / 2)
    assert g10["median_client_us_per_job"] == pytest.approx((40 + 44) / 2)
    glat = runs[("latency 1000/s", "glidemq")]
    assert (glat["median_p50_ms"], glat["median_p95_ms"], glat["median_p99_ms"]) == (
        pytest.approx(0.55),
        pytest.approx(1.7),
        pytest.approx(3.5),
    )
    assert runs[("add-bulk", "bullmq")]["median_client_us_per_job"] == pytest.approx(25.5)

    tput = _by(tables["throughput_by_concurrency"], "system", "concurrency")
    assert {k: v["median_jobs_per_s"] for k, v in tput.items()} == {
        ("glidemq", 10): 21_000,
        ("glidemq", 100): 28_750,
        ("bullmq", 10): 18_000,
        ("bullmq", 100): 22_500,
    }


def _check_ledger(tables: dict[str, list[dict[str, Any]]]) -> None:
    summary = _by(tables["ledger_summary"], "run")
    kill = summary["kill-worker"]
    assert {k: kill[k] for k in ("enqueued", "completed", "completions", "lost")} == {
        "enqueued": 6,
        "completed": 5,
        "completions": 7,
        "lost": 1,
    }
    assert (kill["duplicates"], kill["unexpected"], kill["faults"]) == (1, 1, 1)
    assert kill["recovery_s"] == pytest.approx(101.0 - 100.5)
    assert kill["seconds"] == pytest.approx(102.6 - 100.0)
    assert kill["jobs_per_s"] == pytest.approx(5 / 2.6)
    assert kill["ok"] is False
    restart = summary["restart"]
    assert (restart["enqueued"], restart["completed"], restart["lost"]) == (2, 2, 0)
    assert restart["duplicates"] == 0  # b's second completion is on the cut-off line
    assert (restart["faults"], restart["recovery_s"], restart["ok"]) == (0, None, True)
    assert tables["ledger_lost"] == [{"run": "kill-worker", "job_id": "j5"}]

    # kill-worker latencies, ms: j1 250, j2 350, j3 800, j6 1400, j4 2200
    lat = _by(tables["ledger_latency"], "run")["kill-worker"]
    assert lat["jobs"] == 5
    assert lat["p50_ms"] == pytest.approx(800)
    assert lat["p95_ms"] == pytest.approx(1400 + 0.8 * 800)  # rank 0.95 * 4 = 3.8
    assert lat["p99_ms"] == pytest.approx(1400 + 0.96 * 800)
    assert lat["max_ms"] == pytest.approx(2200)
    assert _by(tables["ledger_latency"], "run")["restart"]["p50_ms"] == pytest.approx(1005)

    procs = _by(tables["ledger_processes"], "run", "pid")
    assert {k: v["completions"] for k, v in procs.items()} == {
        ("kill-worker", 11): 2,
        ("kill-worker", 12): 3,
        ("kill-worker", 13): 2,
        ("restart", 21): 2,
    }
    assert procs[("kill-worker", 12)]["jobs_per_s"] == pytest.approx(3 / 0.9)
    assert procs[("kill-worker", 11)]["share"] == pytest.approx(2 / 7)

    per_second = {(r["run"], r["second"]): r["completions"] for r in tables["ledger_throughput"]}
    assert per_second == {
        ("kill-worker", 0): 2,
        ("kill-worker", 1): 3,
        ("kill-worker", 2): 2,
        ("restart", 0): 1,
        ("restart", 1): 0,  # a second without completions is a 0, not a gap
        ("restart", 2): 1,
    }
    cdf = [r for r in tables["ledger_latency_cdf"] if r["run"] == "kill-worker"]
    assert len(cdf) == 100
    assert cdf[-1]["fraction"] == pytest.approx(1.0)
    assert cdf[-1]["latency_ms"] == pytest.approx(2200)


def test_pipeline_tables_plots_and_report(spark: Any, tmp_path: Path) -> None:
    from glidemq.spark import run_pipeline

    out = tmp_path / "report"
    tables = run_pipeline(RESULTS, out, spark=spark)
    _check_bench(tables)
    _check_ledger(tables)

    # The same ratios as the harness's own arithmetic, on the single-run file.
    harness = ratios(_lines(RESULTS / "records-a.jsonl"))
    spark_ratio = _by(tables["bench_ratios"], "scenario_key")
    for key in ("process c=10", "process c=100", "latency 1000/s"):
        assert spark_ratio[key]["ratio"] == pytest.approx(harness[key]["ratio"])

    for name, rows in tables.items():
        if name == "throughput_by_procs":  # no procs records here: tests/spark/test_bench_keys
            assert rows == []
            continue
        csv = out / f"{name}.csv"
        assert csv.exists(), name
        assert len(csv.read_text().splitlines()) == len(rows) + 1
    for png in (
        "throughput_vs_concurrency",
        "latency_percentiles",
        "cpu_per_job",
        "ledger_throughput",
        "ledger_latency_cdf",
        "ledger_recovery",
    ):
        data = (out / "plots" / f"{png}.png").read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, png
    report = (out / "report.md").read_text()
    assert "| process c=100 | jobs_per_s | 2 | 28,750 | 22,500 | 1.30 |" in report
    assert "| kill-worker | 6 | 5 | 1 | 1 | 1 | 1 | 0.50 |" in report
    assert "Lost jobs: kill-worker:j5" in report
    # the fault's kind, its time to the next completion, the run's own recovery time
    (fault,) = tables["ledger_recovery"]
    assert (fault["run"], fault["kind"], fault["recovery_s"]) == (
        "kill-worker",
        "sigkill-worker",
        0.4,
    )
    assert fault["next_completion_s"] == pytest.approx(0.5)
    assert {(r["outcome"], r["jobs"]) for r in tables["ledger_outcomes"]} == {("completed_once", 2)}
    assert "![cpu_per_job](plots/cpu_per_job.png)" in report


def test_pipeline_reads_parquet_like_jsonl(spark: Any, tmp_path: Path) -> None:
    """The same records as Parquet (a file and a Spark-style dataset directory) give the same
    tables."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(RESULTS / "records-a.jsonl", results)
    pq.write_table(pa.Table.from_pylist(_lines(RESULTS / "records-b.jsonl")),
                   results / "records-b.parquet")  # fmt: skip
    dataset = results / "ledger.parquet"
    dataset.mkdir()
    events = _lines(RESULTS / "ledger-chaos.jsonl")
    pq.write_table(pa.Table.from_pylist(events[:9]), dataset / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(events[9:]), dataset / "part-1.parquet")

    from glidemq.spark import run_pipeline

    tables = run_pipeline(results, tmp_path / "out", spark=spark)
    _check_bench(tables)
    _check_ledger(tables)


def test_pipeline_cli(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from glidemq.spark.report import main

    assert main([str(RESULTS), "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# glidemq report")
    assert (tmp_path / "cli" / "bench_ratios.csv").exists()
    assert main([str(tmp_path / "cli" / "plots"), "--out", str(tmp_path / "x")]) == 2
    assert "no benchmark records or ledger events" in capsys.readouterr().err


def test_old_module_name_still_runs_the_report_cli() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "glidemq.spark.pipeline", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert "python -m glidemq.spark.report" in done.stdout  # the report's own usage
    assert "is now python -m glidemq.spark.report" in done.stderr
