"""`import glidemq` is the queue engine only: the tools (benchmark, chaos suite, Spark
pipeline, web faces) and their third-party libraries stay out of its namespace and its
import graph."""

from __future__ import annotations

import json
import subprocess
import sys

import glidemq
from glidemq import errors

# Packages of glidemq that are tools or optional faces, never part of the engine.
TOOL_PACKAGES = (
    "glidemq.bench",
    "glidemq.chaos",
    "glidemq.spark",
    "glidemq.dashboard",
    "glidemq.proxy",
)
# Third-party libraries only the tools and the tests use.
TOOL_LIBRARIES = ("locust", "gevent", "hypothesis", "pytest", "pyspark", "starlette", "uvicorn")


def _modules_after_import() -> list[str]:
    code = "import json, sys; import glidemq; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_import_glidemq_loads_no_tool_code() -> None:
    loaded = _modules_after_import()
    assert "glidemq" in loaded
    tools = [
        m
        for m in loaded
        if any(m == p or m.startswith(p + ".") for p in (*TOOL_PACKAGES, *TOOL_LIBRARIES))
    ]
    assert tools == [], f"import glidemq loaded tool modules: {tools}"


def test_no_tool_error_in_the_core_namespace() -> None:
    assert "ChaosError" not in glidemq.__all__
    assert not hasattr(glidemq, "ChaosError")
    assert not hasattr(errors, "ChaosError")


def test_chaos_error_lives_with_the_chaos_suite() -> None:
    from glidemq.chaos import ChaosError
    from glidemq.chaos.fleet import FleetError

    assert issubclass(ChaosError, glidemq.GlideMQError)
    assert issubclass(FleetError, ChaosError)
