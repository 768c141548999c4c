"""benchmarks/alone.py (the per-call floor, single add, concurrency 1/10 and idle wake
measurements) runs end to end at tiny sizes and prints every phase it was asked for. No
speed is asserted: a shared 2-core machine makes any number meaningless here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "alone.py"


def test_alone_script_prints_every_phase_with_per_call_figures(
    valkey_server: Any, tmp_path: Path
) -> None:
    phases = ["ping", "fcall", "ctx", "add", "c1", "c10", "wake"]
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--url",
            valkey_server.url,
            "--server-pid",
            str(valkey_server.pid),
            "--calls",
            "40",
            "--jobs",
            "40",
            "--reps",
            "1",
            "--only",
            ",".join(phases),
            "--profile",
            str(tmp_path),
            "--top",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    for phase in phases:
        line = re.search(rf"^{phase} +wall_us +([\d.]+) .*cpu_us +([\d.]+)", run.stdout, re.M)
        assert line is not None, f"no line for {phase}:\n{run.stdout}"
        assert float(line.group(1)) > 0 and float(line.group(2)) >= 0
        assert (tmp_path / f"{phase}.pstats").stat().st_size > 0
    assert re.search(r"^wake .* p50_us +[\d.]+ .* p90_us +[\d.]+", run.stdout, re.M)
