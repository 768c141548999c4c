"""benchmarks/add_lanes.py (adds from many callers at once, and how they share calls) runs
end to end at a tiny size and reports each lane count. No speed is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "add_lanes.py"


def test_add_lanes_script_reports_rates_and_shared_calls(valkey_server: Any) -> None:
    args = ["--url", valkey_server.url, "--lanes", "1,20", "--jobs", "200", "--reps", "1"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    rows = {
        int(m.group(1)): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(r"^lanes +(\d+): .* (\d+) alone, (\d+) shared", run.stdout, re.M)
    }
    assert rows.keys() == {1, 20}, run.stdout
    assert rows[1] == (200, 0), "one caller at a time: every add goes out alone"
    alone, shared = rows[20]
    assert shared > 0 and alone < 200, "callers at once share calls"
