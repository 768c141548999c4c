"""`glidemq-dashboard`, the real console script: serves the pages, binds 127.0.0.1 by
default, refuses bad input with exit 2 and one line; and the live feed (server-sent events)
reports changes without a page reload."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import httpx
import psutil
import pytest

from glidemq import Queue
from tests.conftest import ValkeyAddress

from .conftest import REPO_ROOT, Populated, dashboard_argv, running_dashboard


async def test_the_console_script_serves_the_dashboard_on_loopback(populated: Populated) -> None:
    with running_dashboard(populated.url, "--prefix", populated.prefix, "--read-only") as (
        base,
        proc,
    ):
        async with httpx.AsyncClient(base_url=base) as client:
            r = await client.get("/")
            assert r.status_code == 200 and populated.name in r.text
            r = await client.get("/queue", params={"name": populated.name, "state": "failed"})
            assert r.status_code == 200
            assert 'id="bulk-retry"' not in r.text  # --read-only
        listening = [
            c.laddr
            for c in psutil.Process(proc.pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening and all(a.ip == "127.0.0.1" for a in listening)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "not a port"),
        (["--por", "8080"], "unrecognized arguments: --por"),
        (["--basic-auth-file", "/nonexistent/users"], "cannot read"),
        (["--url", "http://x"], "--url"),
        (["--refresh", "0"], "--refresh"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    valkey_server: ValkeyAddress, args: list[str], message: str
) -> None:
    argv = [*dashboard_argv(), *args]
    if "--url" not in args:
        argv += ["--url", valkey_server.url]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


async def _snapshots(client: httpx.AsyncClient, url: str, out: asyncio.Queue[Any]) -> None:
    async with client.stream("GET", url) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "snapshot":
                await out.put(json.loads(line[6:]))


async def test_the_live_feed_sends_a_snapshot_when_the_queue_changes(
    populated: Populated,
) -> None:
    args = ("--prefix", populated.prefix, "--refresh", "0.2")
    with running_dashboard(populated.url, *args) as (base, _):
        got: asyncio.Queue[Any] = asyncio.Queue()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            reader = asyncio.create_task(_snapshots(client, f"/live?queue={populated.name}", got))
            try:
                first = await asyncio.wait_for(got.get(), 20)
                counts = first["queues"][populated.name]["counts"]
                assert counts["failed"] == 2 and counts["waiting"] == 4
                assert first["queues"][populated.name]["paused"] is False
                assert len(first["chart"]["completed"]) == 60
                assert sum(first["chart"]["completed"]) == 3
                async with Queue(
                    populated.name, connection=populated.url, prefix=populated.prefix
                ) as q:
                    await q.pause()
                    await q.add("late", {"n": 1})
                    while True:
                        snap = await asyncio.wait_for(got.get(), 20)
                        mine = snap["queues"][populated.name]
                        if mine["paused"] and mine["counts"]["waiting"] == 5:
                            break
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)


def test_hash_password_prints_a_line_basic_auth_accepts() -> None:
    import base64

    from starlette.requests import Request

    from glidemq.web.auth import BasicAuth

    done = subprocess.run(
        [*dashboard_argv(), "--hash-password"],
        input="correct horse\n",
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith("pbkdf2_sha256$") and "correct horse" not in line
    auth = BasicAuth({"ann": line})

    def request(password: str) -> Request:
        token = base64.b64encode(f"ann:{password}".encode())
        return Request({"type": "http", "headers": [(b"authorization", b"Basic " + token)]})

    assert auth.user(request("correct horse")) == "ann"
    assert auth.user(request("correct horse!")) is None


async def test_with_valkey_down_it_warns_and_pages_answer_503() -> None:
    from .conftest import free_port

    nowhere = f"valkey://127.0.0.1:{free_port()}"
    with running_dashboard(nowhere) as (base, proc):
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            r = await client.get("/")
            assert r.status_code == 503
            assert 'id="error"' in r.text
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"cannot reach Valkey at {nowhere}" in err


@pytest.mark.parametrize("missing", ["starlette", "jinja2"])
def test_without_the_dashboard_extra_help_works_and_a_start_says_what_to_install(
    missing: str,
) -> None:
    # as if the extra were not installed: an import of `missing` fails
    run = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from glidemq.dashboard.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", run, *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    helped = cli("-h")
    assert helped.returncode == 0 and "glidemq-dashboard" in helped.stdout, helped.stderr
    started = cli("--url", "valkey://127.0.0.1:1")
    assert started.returncode == 2
    assert started.stderr.strip() == (
        "glidemq-dashboard: error: install the dashboard extra: pip install 'glidemq[dashboard]'"
    )
    assert "Traceback" not in started.stderr
