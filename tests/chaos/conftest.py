"""Run the real `glidemq-chaos` CLI in a subprocess and read its one JSON result."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / ".venv" / "bin" / "glidemq-chaos"


@dataclass
class ChaosOutcome:
    code: int
    result: dict[str, Any]
    stderr: str

    def summary(self) -> str:
        shown = {k: v for k, v in self.result.items() if k not in ("machine", "traceback")}
        return f"exit {self.code}; result {shown}\nstderr tail:\n{self.stderr[-3000:]}"


def _argv() -> list[str]:
    if SCRIPT.exists():
        return [str(SCRIPT)]
    print(f"no console script at {SCRIPT}; running the module instead")
    return [sys.executable, "-m", "glidemq.chaos.cli"]


Runner = Callable[..., ChaosOutcome]


@pytest.fixture
def chaos(tmp_path: Path) -> Runner:
    """`chaos("kill-workers", "--jobs", 500, ...)`: the exit code, the parsed stdout JSON
    and stderr. Logs are kept under the test's tmp_path (`workdir=` names another
    directory; each call must then say `--resume` if the directory holds a run)."""

    calls = iter(range(1, 1000))

    def run(
        *args: str | int | float, timeout: float = 100.0, workdir: Path | None = None
    ) -> ChaosOutcome:
        where = workdir if workdir is not None else tmp_path / f"work-{next(calls)}"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("GLIDEMQ_") or k.startswith("GLIDEMQ_VALKEY_")
        }
        done = subprocess.run(
            [*_argv(), *(str(a) for a in args), "--workdir", str(where)],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        stderr = done.stderr.decode(errors="replace")
        lines = done.stdout.decode().strip().splitlines()
        assert len(lines) <= 1, f"more than one line on stdout: {lines[:3]}\n{stderr[-2000:]}"
        result = orjson.loads(lines[0]) if lines else {}
        return ChaosOutcome(done.returncode, result, stderr)

    return run
