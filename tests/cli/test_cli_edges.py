"""Command-line edges of the three CLIs: bad queue names, abbreviated flags."""

from __future__ import annotations

from typing import Any

import pytest

import glidemq
from glidemq.runtime.config import ExitCode

from .conftest import APP, Launcher


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        pytest.param(["--queue", "a:b"], {}, "'a:b'", id="colon"),
        pytest.param(["--queue", "ok", "--queue", "x{y}"], {}, "'x{y}'", id="braces"),
        pytest.param([], {"GLIDEMQ_QUEUE": "a b"}, "'a b'", id="env-space"),
    ],
)
async def test_bad_queue_name_exits_2_with_one_line_before_any_worker_starts(
    args: list[str], env: dict[str, str], needle: str, run_cli: Launcher, valkey_server: Any
) -> None:
    cli = run_cli(f"{APP}:record", "--url", valkey_server.url, *args, env=env)
    assert await cli.wait_exit(20) == ExitCode.USAGE
    err = cli.stderr()
    assert "started worker" not in err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("glidemq-run: error: ")
    assert needle in lines[0] and "queue" in lines[0]


def test_declared_bad_queue_name_fails_at_import() -> None:
    with pytest.raises(glidemq.ValidationError, match="queue"):
        glidemq.processor("a:b")
    with pytest.raises(glidemq.ValidationError, match="queue"):
        glidemq.processor(["fine", "not fine"])
