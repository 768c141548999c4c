"""glidemq on Spark: the `glidemq` data source and the records pipeline (`pip install
'glidemq[spark]'`, Java 17).

    from glidemq.spark import register, session

    spark = session()                # local[*] unless a master is given
    register(spark)
    df = spark.read.format("glidemq").option("url", url).option("queue", "emails").load()

Importing this package does not import PySpark; each function does, when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .session import DEFAULT_MASTER, SparkUnavailableError, java_executable
from .session import session as session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "SparkUnavailableError",
    "java_executable",
    "register",
    "run_pipeline",
    "session",
]


def register(spark: SparkSession) -> None:
    """Register the `glidemq` data source in `spark` (see `glidemq.spark.source`)."""
    from .source import register as _register

    _register(spark)


def run_pipeline(
    results_dir: str | Path,
    out_dir: str | Path,
    master: str = DEFAULT_MASTER,
    *,
    spark: SparkSession | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Turn benchmark and chaos-ledger records into report tables and plots (see
    `glidemq.spark.report.run_pipeline`)."""
    from .report import run_pipeline as _run

    return _run(results_dir, out_dir, master, spark=spark)
