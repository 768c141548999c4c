"""PySpark is optional: the engine never imports it, and a missing Java is a clear error."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_import_glidemq_does_not_import_pyspark() -> None:
    done = _run(
        """
        import sys
        import glidemq, glidemq.spark, glidemq.bench.harness, glidemq.runtime
        from glidemq.spark import register, run_pipeline, session
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j", "pyarrow"))
        print(bad)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_session_without_java_says_so() -> None:
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("PySpark is not installed")
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)  # python, but no java
    done = _run(
        """
        from glidemq.spark import SparkUnavailableError, session
        try:
            session()
        except SparkUnavailableError as exc:
            print(exc)
        """,
        env,
    )
    assert done.returncode == 0, done.stderr
    assert "Spark needs Java 17" in done.stdout
