"""Sandbox children import exactly as their worker does, and a worker whose children cannot
import the processor takes no jobs: they stay waiting and `glidemq-run` exits with its boot
code.

These run the installed console script from a folder of their own (not the repository), as a
user would run it from a checkout of their app."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from glidemq import Queue
from glidemq.runtime.config import ExitCode
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".venv" / "bin" / "glidemq-run"

APP = """
from glidemq import Job


async def processor(job: Job) -> dict:
    return {"n": job.data}
"""

# Imports in the worker (and in glidemq-run's start-up check), but not in a sandbox child.
CHILD_BROKEN = """
import sys

if sys.argv[:1] == ["-c"]:  # a sandbox child (fork server or spawn): `python -c ...`
    raise ImportError("child_broken refuses to load in a sandbox child")


async def processor(job):
    return job.data
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_") or "VALKEY" in k}
    env.pop("PYTHONPATH", None)  # the app folder is the working directory, nothing else
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _launch(workdir: Path, target: str, queue: str, url: str) -> subprocess.Popen[bytes]:
    if not SCRIPT.exists():
        pytest.skip(f"no installed console script at {SCRIPT}")
    argv = [str(SCRIPT), target, "--queue", queue, "--url", url, "--procs", "1"]
    with open(workdir / "stderr.log", "wb") as err:  # the child keeps its own copy
        return subprocess.Popen(
            [*argv, "--concurrency", "2", "--sandbox", "--status-interval", "0"],
            cwd=workdir,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _stop(cli: subprocess.Popen[bytes]) -> None:
    if cli.poll() is None:
        cli.kill()
        cli.wait(10)


async def test_children_import_like_their_worker_next_to_a_glidemq_folder(
    queue: Queue[Any, Any], valkey_server: Any, tmp_path: Path
) -> None:
    (tmp_path / "glidemq").mkdir()  # a stray folder named like the package (e.g. a clone)
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    await queue.add_bulk([("j", i) for i in range(20)])
    cli = _launch(tmp_path, "app:processor", queue.name, valkey_server.url)
    try:

        async def settled() -> bool:
            c = await queue.get_job_counts()
            return c.completed + c.failed == 20 or cli.poll() is not None

        await wait_for(settled, timeout=45, interval=0.2)
        counts = await queue.get_job_counts()
        log = (tmp_path / "stderr.log").read_text(errors="replace")
        assert (counts.completed, counts.failed) == (20, 0), log[-4000:]
        cli.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(cli.wait, 30) == ExitCode.OK
    finally:
        _stop(cli)


async def test_no_child_can_import_jobs_stay_waiting_and_exit_is_boot(
    queue: Queue[Any, Any], valkey_server: Any, tmp_path: Path
) -> None:
    (tmp_path / "child_broken.py").write_text(textwrap.dedent(CHILD_BROKEN))
    await queue.add_bulk([("j", i) for i in range(10)])
    cli = _launch(tmp_path, "child_broken:processor", queue.name, valkey_server.url)
    try:
        code = await asyncio.to_thread(cli.wait, 60)
        log = (tmp_path / "stderr.log").read_text(errors="replace")
        assert code == ExitCode.BOOT, log[-4000:]
        assert "child_broken refuses to load in a sandbox child" in log
        counts = await queue.get_job_counts()
        assert counts.waiting == 10, counts  # none burned into failed, none left active
        assert (counts.failed, counts.active, counts.completed) == (0, 0, 0), counts
    finally:
        _stop(cli)
