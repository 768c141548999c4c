"""The records pipeline: benchmark records and chaos ledgers in, report tables and plots out.

    python -m glidemq.spark.report RESULTS_DIR --out OUT_DIR [--master local[*]]

Reads every `*.jsonl` and `*.parquet` under RESULTS_DIR (see `glidemq.spark.records` for the
two record kinds), computes the tables below with Spark, and writes each as
`OUT_DIR/<table>.csv`, a markdown summary `OUT_DIR/report.md`, and PNG plots under
`OUT_DIR/plots/`.

Benchmark tables (medians are exact, interpolated between the middle two of an even count):

- `bench_runs`: per scenario and system: runs, median / min / max jobs per second, median
  latency percentiles, median server and client CPU µs per job and CPU percent;
- `bench_ratios`: per scenario: glidemq / BullMQ of the scenario's metric (jobs_per_s, or
  p99_ms for latency), taken pair by pair — the two systems' runs of one repetition in one
  records file — with the median, min and max of the pair ratios;
- `throughput_by_concurrency`: the `process` scenario's median jobs/s per system and
  concurrency;
- `throughput_by_procs`: the `procs` scenario's median jobs/s per system and number of
  worker processes.

Ledger tables: see `glidemq.spark.ledger`.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import plots
from .ledger import ledger_tables
from .records import SCENARIO_METRIC, discover, load_bench, load_ledger
from .session import DEFAULT_MASTER, session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["TABLES", "Tables", "bench_tables", "main", "run_pipeline", "write_report"]

Tables = dict[str, list[dict[str, Any]]]

TABLES = (
    "bench_ratios",
    "bench_runs",
    "throughput_by_concurrency",
    "throughput_by_procs",
    "ledger_summary",
    "ledger_lost",
    "ledger_latency",
    "ledger_processes",
    "ledger_throughput",
    "ledger_latency_cdf",
    "ledger_recovery",
    "ledger_outcomes",
)
"""Every table `run_pipeline` returns (empty lists when there was nothing to compute from)."""


def _scenario_key() -> Column:
    """`glidemq.bench.harness.scenario_key` as a column expression."""
    from pyspark.sql import functions as F

    scenario = F.col("scenario")
    c = F.col("concurrency").cast("string")
    procs = F.coalesce(F.col("procs"), F.lit(1)).cast("string")
    return (
        F.when(scenario == "process", F.concat(F.lit("process c="), c))
        .when(scenario == "procs", F.concat(F.lit("procs "), procs, F.lit("x c="), c))
        .when(
            scenario == "latency",
            F.concat(F.lit("latency "), F.col("rate").cast("int").cast("string"), F.lit("/s")),
        )
        .when(
            scenario == "batch",
            F.concat(F.lit("batch c="), c, F.lit(" b="), F.col("batch").cast("string")),
        )
        .when(
            scenario == "cluster",
            F.concat(F.lit("cluster "), F.col("queues").cast("string"), F.lit("q c="), c),
        )
        .when(scenario.isin("sandbox", "memory", "cpu"), F.concat(scenario, F.lit(" c="), c))
        .otherwise(scenario)
    )


def _metric() -> tuple[Column, Column, Column]:
    """The judged metric of each record: (value, its name, higher is better)."""
    from pyspark.sql import functions as F

    value: Any = F
    name: Any = F
    higher: Any = F
    for scenario, (metric, better) in SCENARIO_METRIC.items():
        cond = F.col("scenario") == scenario
        value = value.when(cond, F.col(metric))
        name = name.when(cond, F.lit(metric))
        higher = higher.when(cond, F.lit(better))
    return (
        value.otherwise(F.col("jobs_per_s")),
        name.otherwise(F.lit("jobs_per_s")),
        higher.otherwise(F.lit(True)),
    )


def bench_tables(records: DataFrame) -> dict[str, DataFrame]:
    """`bench_runs`, `bench_ratios`, `throughput_by_concurrency` and `throughput_by_procs`
    from benchmark records."""
    from pyspark.sql import functions as F

    value, metric, higher = _metric()
    df = records.select(
        "*",
        _scenario_key().alias("scenario_key"),
        value.alias("metric_value"),
        metric.alias("metric"),
        higher.alias("higher_is_better"),
    ).cache()
    medians = [
        F.median(c).alias(f"median_{c}")
        for c in (
            "jobs_per_s",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "max_ms",
            "server_us_per_job",
            "client_us_per_job",
            "server_cpu_pct",
            "client_cpu_pct",
        )
    ]
    runs = (
        df.groupBy("scenario_key", "scenario", "system")
        .agg(
            F.count(F.lit(1)).alias("runs"),
            F.min("jobs_per_s").alias("min_jobs_per_s"),
            F.max("jobs_per_s").alias("max_jobs_per_s"),
            *medians,
        )
        .orderBy("scenario_key", "system")
    )
    side = ["source", "scenario_key", "rep"]
    g = df.filter(F.col("system") == "glidemq").select(
        *side, "metric", "higher_is_better", F.col("metric_value").alias("g")
    )
    b = df.filter(F.col("system") == "bullmq").select(*side, F.col("metric_value").alias("b"))
    pairs = g.join(b, side, "inner").select(
        "scenario_key",
        "metric",
        "higher_is_better",
        F.when(F.col("b") != 0, F.col("g") / F.col("b")).alias("ratio"),
    )
    by_system = (
        df.groupBy("scenario_key")
        .pivot("system", ["glidemq", "bullmq"])
        .agg(F.median("metric_value"))
        .withColumnRenamed("glidemq", "median_glidemq")
        .withColumnRenamed("bullmq", "median_bullmq")
    )
    ratios = (
        pairs.groupBy("scenario_key", "metric", "higher_is_better")
        .agg(
            F.count(F.lit(1)).alias("pairs"),
            F.median("ratio").alias("ratio"),
            F.min("ratio").alias("min_ratio"),
            F.max("ratio").alias("max_ratio"),
        )
        .join(by_system, "scenario_key", "left")
        .select(
            "scenario_key",
            "metric",
            "higher_is_better",
            "pairs",
            "median_glidemq",
            "median_bullmq",
            "ratio",
            "min_ratio",
            "max_ratio",
        )
        .orderBy("scenario_key")
    )
    throughput = (
        df.filter(F.col("scenario") == "process")
        .groupBy("system", "concurrency")
        .agg(F.count(F.lit(1)).alias("runs"), F.median("jobs_per_s").alias("median_jobs_per_s"))
        .orderBy("system", "concurrency")
    )
    by_procs = (
        df.filter(F.col("scenario") == "procs")
        .groupBy("system", "procs")
        .agg(F.count(F.lit(1)).alias("runs"), F.median("jobs_per_s").alias("median_jobs_per_s"))
        .orderBy("system", "procs")
    )
    return {
        "bench_runs": runs,
        "bench_ratios": ratios,
        "throughput_by_concurrency": throughput,
        "throughput_by_procs": by_procs,
    }


def _collect(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.collect()]


def run_pipeline(
    results_dir: str | Path,
    out_dir: str | Path,
    master: str = DEFAULT_MASTER,
    *,
    spark: SparkSession | None = None,
) -> Tables:
    """Compute every table from the records under `results_dir`, write the CSVs, `report.md`
    and the plots to `out_dir`, and return the tables (name -> rows as dicts).

    `spark` reuses a running session; otherwise `glidemq.spark.session(master)` gives one.
    Raises FileNotFoundError when `results_dir` holds no records.
    """
    files = discover(results_dir)
    if files.empty():
        raise FileNotFoundError(f"no benchmark records or ledger events under {results_dir}")
    spark = spark or session(master, app_name="glidemq-report")
    tables: Tables = {name: [] for name in TABLES}
    bench = load_bench(spark, files)
    if bench is not None:
        for name, df in bench_tables(bench).items():
            tables[name] = _collect(df)
    ledger = load_ledger(spark, files)
    if ledger is not None:
        for name, df in ledger_tables(ledger).items():
            tables[name] = _collect(df)
    write_report(tables, Path(out_dir))
    return tables


# -- output -------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value)
    return str(value)


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """One table as CSV (header from the first row's keys)."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(rows[0]))
        for row in rows:
            writer.writerow([_cell(v) for v in row.values()])
    return path


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as a markdown table of the given columns."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def _summary(tables: Tables, written: dict[str, Path]) -> str:
    out = ["# glidemq report", ""]
    if tables["bench_ratios"]:
        out += [
            "## glidemq vs BullMQ",
            "",
            "Ratio = glidemq / BullMQ of the metric, median of the pairs of one repetition; "
            "lower is better for latency (p99_ms), memory (rss_peak_mb) and cpu "
            "(cpu_us_per_job).",
            "",
            markdown_table(
                tables["bench_ratios"],
                [
                    *("scenario_key", "metric", "pairs", "median_glidemq", "median_bullmq"),
                    *("ratio", "min_ratio", "max_ratio"),
                ],
            ),
            "",
        ]
    if tables["bench_runs"]:
        out += [
            "## Runs by scenario and system (medians)",
            "",
            markdown_table(
                tables["bench_runs"],
                [
                    *("scenario_key", "system", "runs", "median_jobs_per_s", "median_p50_ms"),
                    *("median_p99_ms", "median_server_us_per_job", "median_client_us_per_job"),
                ],
            ),
            "",
        ]
    if tables["ledger_summary"]:
        out += [
            "## Chaos ledger",
            "",
            "lost = enqueued with no completion (must be 0); duplicates = completions beyond "
            "one per job; recovery_s = longest time from a fault to the next completion.",
            "",
            markdown_table(
                tables["ledger_summary"],
                [
                    *("run", "enqueued", "completed", "lost", "duplicates", "unexpected"),
                    *("faults", "recovery_s", "jobs_per_s", "ok"),
                ],
            ),
            "",
        ]
        if tables["ledger_lost"]:
            shown = tables["ledger_lost"][:20]
            ids = ", ".join(f"{r['run']}:{r['job_id']}" for r in shown)
            more = len(tables["ledger_lost"]) - len(shown)
            out += [f"Lost jobs: {ids}" + (f" and {more} more" if more else ""), ""]
        if tables["ledger_latency"]:
            out += [
                markdown_table(
                    tables["ledger_latency"],
                    ["run", "jobs", "p50_ms", "p95_ms", "p99_ms", "max_ms"],
                ),
                "",
            ]
        if tables["ledger_outcomes"]:
            out += [
                "### Outcomes",
                "",
                markdown_table(tables["ledger_outcomes"], ["run", "outcome", "jobs"]),
                "",
            ]
        if tables["ledger_recovery"]:
            out += [
                "### Recovery per fault",
                "",
                "next_completion_s = fault to the next completion; recovery_s = fault until "
                "throughput is back to half its pre-fault rate (glidemq-chaos).",
                "",
                markdown_table(
                    tables["ledger_recovery"],
                    ["run", "kind", "at_s", "next_completion_s", "recovery_s"],
                ),
                "",
            ]
        if tables["ledger_processes"]:
            out += [
                "### Per process",
                "",
                markdown_table(
                    tables["ledger_processes"],
                    ["run", "pid", "completions", "jobs", "jobs_per_s", "share"],
                ),
                "",
            ]
    pngs = [p for p in written.values() if p.suffix == ".png"]
    if pngs:
        out += ["## Plots", ""]
        out += [f"![{p.stem}](plots/{p.name})" for p in pngs]
        out.append("")
    return "\n".join(out)


def write_report(tables: Tables, out_dir: Path) -> dict[str, Path]:
    """Write the non-empty tables as CSV, the plots and `report.md`; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, rows in tables.items():
        if rows:
            written[name] = write_csv(rows, out_dir / f"{name}.csv")
    runs = tables["bench_runs"]
    plot_dir = out_dir / "plots"
    figures = {
        "throughput_vs_concurrency": plots.plot_throughput_vs_concurrency(
            tables["throughput_by_concurrency"], plot_dir / "throughput_vs_concurrency.png"
        ),
        "throughput_vs_procs": plots.plot_throughput_vs_procs(
            tables["throughput_by_procs"], plot_dir / "throughput_vs_procs.png"
        ),
        "latency_percentiles": plots.plot_latency_percentiles(
            [r for r in runs if r["scenario"] == "latency"], plot_dir / "latency_percentiles.png"
        ),
        "cpu_per_job": plots.plot_cpu_per_job(runs, plot_dir / "cpu_per_job.png"),
        "ledger_throughput": plots.plot_ledger_throughput(
            tables["ledger_throughput"], plot_dir / "ledger_throughput.png"
        ),
        "ledger_latency_cdf": plots.plot_ledger_latency_cdf(
            tables["ledger_latency_cdf"], plot_dir / "ledger_latency_cdf.png"
        ),
        "ledger_recovery": plots.plot_ledger_recovery(
            tables["ledger_recovery"], plot_dir / "ledger_recovery.png"
        ),
    }
    for name, path in figures.items():
        if path is not None:
            written[f"plot:{name}"] = path
    report = out_dir / "report.md"
    report.write_text(_summary(tables, written))
    written["report"] = report
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m glidemq.spark.report RESULTS_DIR --out OUT_DIR [--master MASTER]`."""
    parser = argparse.ArgumentParser(
        prog="python -m glidemq.spark.report",
        description="Report tables (CSV, markdown) and PNG plots from benchmark records "
        "and chaos ledgers, computed with Spark.",
    )
    parser.add_argument("results", help="directory (or file) of *.jsonl / *.parquet records")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help=f"Spark master (default {DEFAULT_MASTER})"
    )
    args = parser.parse_args(argv)
    try:
        run_pipeline(args.results, args.out, args.master)
    except FileNotFoundError as exc:
        print(f"glidemq report: {exc}", file=sys.stderr)
        return 2
    report = Path(args.out) / "report.md"
    print(report.read_text())
    print(f"tables, plots and report written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
