"""Command-line edges of the three CLIs: bad queue names, abbreviated flags."""

from __future__ import annotations

from typing import Any

import pytest

import glidemq
from glidemq.runtime.config import ExitCode

from .conftest import APP, Launcher, free_port


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


async def test_a_bare_address_as_url_suggests_the_valkey_scheme(run_cli: Launcher) -> None:
    cli = run_cli(f"{APP}:record", "--url", "127.0.0.1:6411")
    assert await cli.wait_exit(20) == ExitCode.USAGE
    assert cli.stderr().strip() == (
        "glidemq-run: error: url: '127.0.0.1:6411' has no scheme: "
        "write it as 'valkey://127.0.0.1:6411'"
    )


async def test_a_refused_server_is_one_line_naming_glidemq_server(run_cli: Launcher) -> None:
    port = free_port()
    url = f"valkey://127.0.0.1:{port}"
    cli = run_cli(f"{APP}:record", "--queue", "q", "--url", url, "--connect-timeout", 0)
    assert await cli.wait_exit(20) == ExitCode.UNREACHABLE
    err = cli.stderr()
    assert "Traceback" not in err
    (last,) = [line for line in err.splitlines() if line.startswith("glidemq-run: error:")]
    assert f"127.0.0.1:{port}: Connection refused" in last
    assert "Start one with glidemq-server, or point GLIDEMQ_URL (--url" in last
