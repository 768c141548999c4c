"""The processor chaos runs use: `glidemq-run glidemq.chaos.app:process`.

It sleeps `job.data["ms"]` milliseconds and returns `{"id": job id, "pid": pid}`. When the
environment variable `GLIDEMQ_CHAOS_DIR` names a directory, every execution appends two
ledger lines to `<dir>/exec-<pid>.jsonl`: `started` before the work and `processed` after
it (so a run can tell a job that ran twice to the end from one that was cut off). Each line
is one unbuffered `write(2)`, so a SIGKILL loses nothing that was written.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson

from ..processor import processor

__all__ = ["DIR_ENV", "exec_file", "process"]

DIR_ENV = "GLIDEMQ_CHAOS_DIR"

_fd = -1
_fd_pid = -1


def exec_file(directory: str, pid: int) -> str:
    """Path of the execution ledger of process `pid` under `directory`."""
    return os.path.join(directory, f"exec-{pid}.jsonl")


def _record(event: str, job_id: str) -> None:
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd_pid != pid:  # first call in this process (or a forked copy): its own file
        directory = os.environ.get(DIR_ENV)
        if not directory:
            _fd_pid = pid
            _fd = -1
            return
        _fd = os.open(exec_file(directory, pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fd_pid = pid
    if _fd >= 0:
        line = {"event": event, "job_id": job_id, "ts": time.time(), "pid": pid}
        os.write(_fd, orjson.dumps(line) + b"\n")


# A job may stall more than once in a run that kills several workers: let it come back
# instead of failing it on the second stall.
@processor(max_stalled_count=20)
async def process(job: Any) -> dict[str, Any]:
    """Record the execution, sleep `ms`, return the job id and this process's pid."""
    _record("started", job.id)
    data = job.data if isinstance(job.data, dict) else {}
    ms = float(data.get("ms", 0) or 0)
    if ms > 0:
        await asyncio.sleep(ms / 1000)
    _record("processed", job.id)
    return {"id": job.id, "pid": os.getpid()}
