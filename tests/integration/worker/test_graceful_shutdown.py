"""GracefulShutdown in a plain program: SIGTERM closes the worker and loses nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from glidemq import Queue
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[3]


async def test_sigterm_hands_running_jobs_back_and_exits_zero(
    valkey_server: Any, queue_name: str
) -> None:
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        await queue.add_bulk([("slow", {"sleep": 30}) for _ in range(6)])
        proc = subprocess.Popen(  # noqa: ASYNC220 - a real child process is the point
            [sys.executable, "tests/fixtures/graceful_app.py", valkey_server.url, queue_name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            await wait_for(lambda: _active(queue), timeout=10)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)
        finally:
            proc.kill()
        assert proc.returncode == 0
        assert "closed after SIGTERM" in out
        counts = await queue.get_job_counts()
        assert counts.active == 0
        assert counts.waiting == 6  # the 4 running jobs were handed back, 2 never started
        await queue.obliterate(force=True)


async def _active(queue: Queue[Any, Any]) -> bool:
    return (await queue.get_job_counts()).active == 4
