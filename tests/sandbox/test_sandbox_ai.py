"""`glidemq-run --sandbox`: a processor in a sandbox child streams tokens and reports usage;
both calls are proxied to the worker process, which owns the connection."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import psutil

from glidemq import Queue
from tests.fixtures.ai_app import tokens_for
from tests.helpers import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(target: str, queue: Queue[Any, Any], url: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")}
    env["PYTHONPATH"] = ROOT
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glidemq.runtime.cli",
            target,
            *("--queue", queue.name, "--url", url, "--procs", "1"),
            *("--concurrency", "2", "--sandbox"),
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def stop(cli: subprocess.Popen[bytes], supervisor: psutil.Process) -> None:
    if cli.poll() is None:
        for p in supervisor.children(recursive=True):
            p.kill()
        cli.kill()
        await asyncio.to_thread(cli.wait)


async def test_streaming_and_usage_from_a_sandbox_child(
    queue: Queue[Any, Any], valkey_server: Any
) -> None:
    prompt = "stream these words from a child process"
    cli = run_cli("tests.fixtures.ai_app:chat", queue, valkey_server.url)
    supervisor = psutil.Process(cli.pid)
    try:
        job = await queue.add("chat", {"prompt": prompt})
        got = [c async for c in queue.stream_job(job.id, block_ms=200)]
        assert got == tokens_for(prompt)
        assert await job.wait_until_finished(timeout=30) == "completed"
        assert job.usage is not None and job.usage.total_tokens == 2 * len(got)
        assert job.returnvalue["tokens"] == 2 * len(got)
        workers = supervisor.children()
        assert job.returnvalue["pid"] not in {supervisor.pid, *(w.pid for w in workers)}
        summary = await queue.get_usage_summary()
        assert summary.models["fake-1"].calls == 1
        cli.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(cli.wait, 30)
        assert code == 0, cli.stderr.read().decode() if cli.stderr else ""
    finally:
        await stop(cli, supervisor)


async def test_suspend_and_signal_from_a_sandbox_child(
    queue: Queue[Any, Any], valkey_server: Any
) -> None:
    cli = run_cli("tests.fixtures.ai_app:approve", queue, valkey_server.url)
    supervisor = psutil.Process(cli.pid)
    try:
        job = await queue.add("review", None)

        async def suspended() -> bool:
            return [j.id for j in await queue.get_suspended()] == [job.id]

        await wait_for(suspended, timeout=30)
        assert (await queue.get_job_counts()).suspended == 1
        assert await queue.signal(job.id, "carol", "ship it") == "waiting"
        assert await job.wait_until_finished(timeout=30) == "completed"
        assert job.returnvalue["by"] == "carol" and job.returnvalue["verdict"] == "ship it"
        workers = supervisor.children()
        assert job.returnvalue["pid"] not in {supervisor.pid, *(w.pid for w in workers)}
        assert [c async for c in queue.stream_job(job.id, block_ms=100)] == [
            "draft ready",
            "resumed",
        ]
        assert job.attempts_made == 0  # the suspension was not a failed attempt
        cli.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(cli.wait, 30)
        assert code == 0, cli.stderr.read().decode() if cli.stderr else ""
    finally:
        await stop(cli, supervisor)
