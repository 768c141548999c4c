"""`glidemq-run --sandbox`: worker processes run the target in sandbox children."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import psutil

from glidemq import Queue
from tests.helpers import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_glidemq_run_sandbox(queue: Queue[Any, Any], valkey_server: Any) -> None:
    added = await queue.add_bulk([("e", i) for i in range(20)])
    env = {**os.environ, "PYTHONPATH": ROOT}
    env = {k: v for k, v in env.items() if not k.startswith("GLIDEMQ_") or "VALKEY" in k}
    cli = subprocess.Popen(  # noqa: ASYNC220 - started once, waited on in a thread
        [
            sys.executable,
            "-m",
            "glidemq.runtime.cli",
            "tests.fixtures.sandbox_procs:echo",
            *("--queue", queue.name, "--url", valkey_server.url, "--procs", "1"),
            *("--concurrency", "2", "--max-jobs-per-child", "5", "--sandbox"),
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    supervisor = psutil.Process(cli.pid)
    try:

        async def all_done() -> bool:
            counts = await queue.get_job_counts()
            return counts.completed == 20

        await wait_for(all_done, timeout=30)
        tree = supervisor.children(recursive=True)
        workers = supervisor.children()
        assert len(workers) == 1  # --procs 1: one worker process holding the connection
        pids = set()
        for a in added:
            assert a is not None
            job = await queue.get_job(a.id)
            assert job is not None
            pids.add(job.returnvalue["pid"])
        assert workers[0].pid not in pids  # run by sandbox children, not the worker
        assert len(pids) >= 4  # --max-jobs-per-child 5 recycles sandbox children
        cli.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(cli.wait, 30)
        assert code == 0, cli.stderr.read().decode() if cli.stderr else ""
        await wait_for(lambda: not any(p.is_running() and not _zombie(p) for p in tree))
    finally:
        if cli.poll() is None:
            for p in supervisor.children(recursive=True):
                p.kill()
            cli.kill()
            cli.wait()


def _zombie(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
