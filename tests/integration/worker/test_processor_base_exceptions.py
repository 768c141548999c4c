"""A processor raising KeyboardInterrupt or SystemExit fails that job only: the event loop,
the worker and the other running jobs go on (in-process Worker and the in-memory engine,
async, sync and batch processors, with and without a timeout).

Each case runs in a subprocess (tests/fixtures/base_exception_script.py under asyncio.run):
a BaseException that escapes into the loop ends that process, not the test session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


def _run_script(*args: str) -> dict[str, list[Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.base_exception_script", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout + proc.stderr[-3000:]
    out: dict[str, list[Any]] = json.loads(lines[-1])
    return out


@pytest.mark.parametrize("engine", ["server", "memory"])
@pytest.mark.parametrize("kind", ["async", "sync", "batch"])
@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("timeout_ms", [0, 20_000])
def test_base_exception_from_processor_fails_only_that_job(
    engine: str, kind: str, exc: str, timeout_ms: int, valkey_server: Any, queue_name: str
) -> None:
    out = _run_script(engine, kind, exc, str(timeout_ms), valkey_server.url, queue_name)
    state, reason = out.pop("boom")
    assert state == "failed"
    assert exc in reason and "processor raised" in reason, reason
    if exc == "SystemExit":
        assert "3" in reason  # the exit code is part of the reason
    assert all(v == ["completed", None] for v in out.values()), out
