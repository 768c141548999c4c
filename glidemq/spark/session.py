"""The one place where glidemq creates a SparkSession: local mode, small memory, quiet logs.

Spark's Python workers must run the same interpreter as the driver (it has glidemq and its
dependencies installed); left alone, Spark starts `python3` from PATH and the workers die with
`ModuleNotFoundError`. So the worker executable is always set explicitly.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GlideMQError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "SparkUnavailableError", "java_executable", "session"]

DEFAULT_MASTER = "local[*]"

# Spark prints INFO and WARN lines by the dozen before any code can lower the level; this
# configuration is handed to the driver JVM at launch so only errors reach the console.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


class SparkUnavailableError(GlideMQError):
    """PySpark or Java is missing, so no SparkSession can start."""


def java_executable() -> str | None:
    """The `java` Spark would launch (`$JAVA_HOME/bin/java`, else the one on PATH), or None."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def _log_config() -> str:
    path = Path(tempfile.gettempdir()) / "glidemq-spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)
    return path.as_uri()


def session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "glidemq",
    conf: Mapping[str, str] | None = None,
    python: str | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession.

    `master` is `local[*]` (all cores of this machine) by default; pass `spark://host:7077`,
    `yarn`, `k8s://...` for a cluster, whose executors then need `glidemq[spark]` installed
    under the same Python path (or pass `python`). `conf` entries override the defaults:
    1 GiB for the driver and executors, 8 shuffle partitions, no web UI, no progress bars,
    UTC session time zone, log level ERROR.

    Spark allows one session per process: when one is already running it is returned as it
    is (its master cannot change).

    Raises SparkUnavailableError when PySpark (`pip install 'glidemq[spark]'`) or Java 17 is
    missing.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailableError(
            f"PySpark is not installed ({exc}); install it with: pip install 'glidemq[spark]'"
        ) from None
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if java_executable() is None:
        raise SparkUnavailableError(
            "Spark needs Java 17: no `java` on PATH and no JAVA_HOME "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
        )
    worker_python = python or sys.executable
    # Planner and writer hooks of Python data sources run in workers started from this too.
    os.environ["PYSPARK_PYTHON"] = worker_python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings: dict[str, str] = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.executor.memory": "1g",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": worker_python,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log_config()}",
    }
    if master.startswith("local"):
        # Bind to loopback: no firewall prompts, no "hostname resolves to a loopback" warning.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
