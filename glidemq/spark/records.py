"""Finding and loading the pipeline's input: benchmark records and chaos-ledger events.

A results directory holds JSON Lines files (`*.jsonl`) and Parquet files or datasets
(`*.parquet`), at any depth. Each holds one kind of record, told apart by its fields:

- a **benchmark record** has `system` and `scenario` (one line per run, written by
  `glidemq.bench.harness.make_record`);
- a **ledger event** has `event`: `{"event": "enqueued" | "completed" | "fault", "job_id":
  str, "ts": epoch seconds (float), "pid": int, "run": str (optional)}`.

Per-job benchmark records (`glidemq.bench.jobrecords`: `job_id` and `started_ms`) are left
alone: they are the raw data behind the benchmark records, not input of this pipeline.

Lines that are not valid JSON of the expected shape (a file cut off by a crash) are dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "BENCH_FIELDS",
    "LEDGER_FIELDS",
    "SCENARIO_METRIC",
    "RecordFiles",
    "discover",
    "load_bench",
    "load_ledger",
]

log = logging.getLogger("glidemq.spark")

# Benchmark record fields (`make_record`), with their Spark types.
BENCH_FIELDS: tuple[tuple[str, str], ...] = (
    ("system", "string"),
    ("scenario", "string"),
    ("jobs", "bigint"),
    ("concurrency", "bigint"),
    ("inflight", "bigint"),
    ("rate", "double"),
    ("procs", "bigint"),
    ("batch", "bigint"),
    ("queues", "bigint"),
    ("rep", "bigint"),
    ("seconds", "double"),
    ("jobs_per_s", "double"),
    ("server_cpu_pct", "double"),
    ("client_cpu_pct", "double"),
    ("server_us_per_job", "double"),
    ("client_us_per_job", "double"),
    ("p50_ms", "double"),
    ("p95_ms", "double"),
    ("p99_ms", "double"),
    ("max_ms", "double"),
    ("cpu_us_per_job", "double"),
    ("rss_peak_mb", "double"),
    ("rss_growth_mb", "double"),
    ("inprocess_jobs_per_s", "double"),
    ("version", "string"),
    ("ts", "double"),
)

# Ledger event fields. `run` groups events of one chaos run; missing means "default".
LEDGER_FIELDS: tuple[tuple[str, str], ...] = (
    ("event", "string"),
    ("job_id", "string"),
    ("ts", "double"),
    ("pid", "bigint"),
    ("run", "string"),
    ("kind", "string"),
    ("recovery_s", "double"),
    ("outcome", "string"),
)


# Which number a scenario is judged by, and whether higher is better.
Ratio = tuple[str, bool]
SCENARIO_METRIC: dict[str, Ratio] = {
    "add-single": ("jobs_per_s", True),
    "add-sync": ("jobs_per_s", True),
    "add-concurrent": ("jobs_per_s", True),
    "add-bulk": ("jobs_per_s", True),
    "process": ("jobs_per_s", True),
    "procs": ("jobs_per_s", True),
    "latency": ("p99_ms", False),
    "sandbox": ("jobs_per_s", True),
    "batch": ("jobs_per_s", True),
    "fair": ("jobs_per_s", True),
    "cluster": ("jobs_per_s", True),
    "memory": ("rss_peak_mb", False),
    "cpu": ("cpu_us_per_job", False),
}


@dataclass
class RecordFiles:
    """The input files by kind."""

    bench_jsonl: list[Path] = field(default_factory=list)
    ledger_jsonl: list[Path] = field(default_factory=list)
    bench_parquet: list[Path] = field(default_factory=list)
    ledger_parquet: list[Path] = field(default_factory=list)

    def empty(self) -> bool:
        return not (
            self.bench_jsonl or self.ledger_jsonl or self.bench_parquet or self.ledger_parquet
        )


def _kind(fields: set[str] | dict[str, Any]) -> str | None:
    if "job_id" in fields and "started_ms" in fields:
        return "jobs"
    if "event" in fields:
        return "ledger"
    if "system" in fields and "scenario" in fields:
        return "bench"
    return None


def _jsonl_kind(path: Path) -> str | None:
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    return None
                return _kind(obj) if isinstance(obj, dict) else None
    return None


def _parquet_kind(path: Path) -> str | None:
    import pyarrow.parquet as pq

    file = path
    if path.is_dir():
        parts = sorted(p for p in path.rglob("*.parquet") if p.is_file())
        if not parts:
            return None
        file = parts[0]
    return _kind(set(pq.read_schema(file).names))


def discover(results: str | Path) -> RecordFiles:
    """The record files under `results` (a directory, or one file), sorted, by kind."""
    root = Path(results)
    if not root.exists():
        raise FileNotFoundError(f"no such results directory or file: {root}")
    files = RecordFiles()
    jsonl = [root] if root.is_file() and root.suffix == ".jsonl" else sorted(root.rglob("*.jsonl"))
    for path in jsonl:
        kind = _jsonl_kind(path)
        if kind == "bench":
            files.bench_jsonl.append(path)
        elif kind == "ledger":
            files.ledger_jsonl.append(path)
        elif kind != "jobs":
            log.warning("skipping %s: neither benchmark records nor ledger events", path)
    parquet: list[Path] = []
    candidates = [root] if root.suffix == ".parquet" else sorted(root.rglob("*.parquet"))
    for path in candidates:
        if not any(parent in parquet for parent in path.parents):  # a dataset's part files
            parquet.append(path)
    for path in parquet:
        kind = _parquet_kind(path)
        if kind == "bench":
            files.bench_parquet.append(path)
        elif kind == "ledger":
            files.ledger_parquet.append(path)
        elif kind != "jobs":
            log.warning("skipping %s: neither benchmark records nor ledger events", path)
    return files


def _schema(fields: tuple[tuple[str, str], ...]) -> StructType:
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    kinds = {"string": StringType(), "bigint": LongType(), "double": DoubleType()}
    return StructType([StructField(name, kinds[kind], True) for name, kind in fields])


def _load(
    spark: SparkSession,
    jsonl: list[Path],
    parquet: list[Path],
    fields: tuple[tuple[str, str], ...],
) -> DataFrame | None:
    from pyspark.sql import functions as F

    frames: list[DataFrame] = []
    names = [name for name, _ in fields]
    if jsonl:
        df = (
            spark.read.schema(_schema(fields))
            .option("mode", "DROPMALFORMED")
            .json([str(p) for p in jsonl])
        )
        frames.append(df.withColumn("source", F.input_file_name()))
    for path in parquet:
        df = spark.read.parquet(str(path))
        cols = [
            (F.col(name) if name in df.columns else F.lit(None)).cast(kind).alias(name)
            for name, kind in fields
        ]
        frames.append(df.select(*cols, F.lit(str(path)).alias("source")))
    if not frames:
        return None
    out = frames[0]
    for other in frames[1:]:
        out = out.unionByName(other)
    return out.select(*names, "source")


def load_bench(spark: SparkSession, files: RecordFiles) -> DataFrame | None:
    """Benchmark records with a `source` column (the file of one `glidemq-bench` run)."""
    df = _load(spark, files.bench_jsonl, files.bench_parquet, BENCH_FIELDS)
    if df is None:
        return None
    return df.filter("system IS NOT NULL AND scenario IS NOT NULL")


def load_ledger(spark: SparkSession, files: RecordFiles) -> DataFrame | None:
    """Ledger events; a missing `run` becomes `default`."""
    from pyspark.sql import functions as F

    df = _load(spark, files.ledger_jsonl, files.ledger_parquet, LEDGER_FIELDS)
    if df is None:
        return None
    return df.filter("event IS NOT NULL").withColumn(
        "run", F.coalesce(F.col("run"), F.lit("default"))
    )
