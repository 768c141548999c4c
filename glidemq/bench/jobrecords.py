"""Raw per-job records of benchmark runs, as Parquet.

Each run of a scenario that processes jobs in one process (`RAW_SCENARIOS`) can write one
JSON line per completed job; the harness turns a run's lines into one Parquet file:

| column | type | |
|---|---|---|
| system, scenario, scenario_key | string | which run |
| rep | int64 | repetition |
| queue | string | the job's queue (the cluster scenario has several) |
| job_id | string | unique within its queue |
| enqueued_ms | double | when the job was added (epoch ms, the job's timestamp) |
| started_ms | double | when a worker took it (epoch ms; null if unknown) |
| finished_ms | double | when it completed (epoch ms; glidemq: when the worker saw it) |
| pid | int64 | the process that ran the processor |

The records pipeline (`glidemq.spark`) leaves these files alone; read them with pyarrow,
pandas or Spark (`spark.read.parquet("results/jobs")`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

__all__ = ["COLUMNS", "RAW_SCENARIOS", "raw_file_name", "read_jsonl", "write_parquet"]

RAW_SCENARIOS = frozenset({"process", "sandbox", "batch", "cluster", "cpu"})
"""Scenarios whose runs write per-job records (one worker process, both systems)."""

COLUMNS: tuple[tuple[str, str], ...] = (
    ("system", "string"),
    ("scenario", "string"),
    ("scenario_key", "string"),
    ("rep", "int64"),
    ("queue", "string"),
    ("job_id", "string"),
    ("enqueued_ms", "double"),
    ("started_ms", "double"),
    ("finished_ms", "double"),
    ("pid", "int64"),
)


def raw_file_name(system: str, scenario_key: str, rep: int) -> str:
    """A file name for one run's records, e.g. `glidemq-process_c_100-rep0`."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", scenario_key).strip("_")
    return f"{system}-{slug}-rep{rep}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of one run (lines that do not parse are skipped: a cut-off last line)."""
    rows = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return rows


def write_parquet(
    rows: list[dict[str, Any]], path: Path, *, system: str, scenario: str, key: str, rep: int
) -> Path:
    """Write one run's records (from `read_jsonl`) as a Parquet file; returns its path.

    Needs pyarrow (the `spark` extra of the package)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def column(name: str) -> list[Any]:
        return [row.get(name) for row in rows]

    def number(name: str) -> list[float | None]:
        return [None if v is None else float(v) for v in column(name)]

    n = len(rows)
    table = pa.table(
        {
            "system": pa.array([system] * n, pa.string()),
            "scenario": pa.array([scenario] * n, pa.string()),
            "scenario_key": pa.array([key] * n, pa.string()),
            "rep": pa.array([rep] * n, pa.int64()),
            "queue": pa.array([str(v) for v in column("queue")], pa.string()),
            "job_id": pa.array([str(v) for v in column("job_id")], pa.string()),
            "enqueued_ms": pa.array(number("enqueued_ms"), pa.float64()),
            "started_ms": pa.array(number("started_ms"), pa.float64()),
            "finished_ms": pa.array(number("finished_ms"), pa.float64()),
            "pid": pa.array([None if v is None else int(v) for v in column("pid")], pa.int64()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
