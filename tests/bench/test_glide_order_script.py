"""benchmarks/glide_order.py (the reproduction BENCHMARKS.md gives valkey-glide's maintainers
of replies on one client handed back out of order) runs end to end at a tiny size, imports
nothing of glidemq, and reports its count. How often the order breaks depends on the load,
so no count is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.bench.standalone import top_level_imports

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "glide_order.py"


def test_the_script_stands_alone() -> None:
    imported = top_level_imports(SCRIPT)
    assert "glidemq" not in imported and "tests" not in imported, imported


def test_the_script_reports_its_rounds(valkey_server: Any) -> None:
    args = ["--host", valkey_server.host, "--port", str(valkey_server.port), "--rounds", "30"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--hogs", "1", "--hog-seconds", "30"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    found = re.search(r"^(\d+) of 30 rounds: call 2's result", run.stdout, re.M)
    assert found is not None, run.stdout
    assert 0 <= int(found.group(1)) <= 30
