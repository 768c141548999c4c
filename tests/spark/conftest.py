"""One SparkSession for every Spark test (a cold start costs ~30 s, so it is paid once).

The session runs `local[2,3]`: two threads, and a failed task is tried up to three times, as
on a cluster, so the retry tests see real task retries. Without Java or PySpark the tests
that need the session are skipped, and the reason is printed in pytest's summary.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

MASTER = "local[2,3]"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared SparkSession with the `glidemq` data source registered."""
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("PySpark is not installed: pip install -e '.[spark]' to run the Spark tests")
    from glidemq.spark import java_executable, register, session

    if java_executable() is None:
        pytest.skip("Java 17 not found (no java on PATH, no JAVA_HOME): Spark tests skipped")
    spark = session(MASTER, app_name="glidemq-tests")
    register(spark)
    try:
        yield spark
    finally:
        spark.stop()
