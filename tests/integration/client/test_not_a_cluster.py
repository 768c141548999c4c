"""A URL that asks for a cluster (`?cluster=1`) given a standalone server: the error says
what was found there (a standalone server, `cluster_enabled:0`) and what to change, from
the library and from the `glidemq` command (exit 1, one line)."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

import glidemq
from glidemq import Queue
from tests.conftest import ValkeyAddress

from ...cli.conftest import REPO_ROOT, cli_env


async def test_a_cluster_url_on_a_standalone_server_says_what_it_found(
    valkey_server: ValkeyAddress,
) -> None:
    url = f"{valkey_server.url}?cluster=1"
    with pytest.raises(glidemq.ConnectionError) as caught:
        async with Queue("q", connection=url) as queue:
            await queue.add("x", {})
    text = str(caught.value)
    assert f"{valkey_server.host}:{valkey_server.port} is a standalone server" in text
    assert "cluster_enabled:0" in text and "drop ?cluster=1" in text


async def test_the_admin_command_says_it_in_one_line(valkey_server: ValkeyAddress) -> None:
    done = await asyncio.to_thread(
        subprocess.run,
        [str(REPO_ROOT / ".venv" / "bin" / "glidemq"), "--url", f"{valkey_server.url}?cluster=1",
         "queues"],
        cwd=REPO_ROOT, env=cli_env({}), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a standalone server" in lines[0], done.stderr
