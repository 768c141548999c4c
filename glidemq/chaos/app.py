"""The processor chaos runs use: `glidemq-run glidemq.chaos.app:process`.

It sleeps `job.data["ms"]` milliseconds and returns `{"id": job id, "pid": pid, "run":
execution token}`; the token is unique per execution, so the result a job's hash keeps
names the one execution that completed it. When the environment variable
`GLIDEMQ_CHAOS_DIR` names a directory, every execution appends two lines to its own
append-only ledger `<dir>/exec-<pid>.jsonl`: `started` before the work and `processed`
after it, with the digest of the result it returns (see `result_digest`), and `acked` when
the Worker was told the server stored the completion (its `completed` event: with
durability on, only once the replicas confirmed it). Each line is one unbuffered
`write(2)`, so a SIGKILL loses nothing that was written.

`GLIDEMQ_CHAOS_MAX_STALLED` sets the processor's `max_stalled_count` (default 20).

Planted behaviours, for the verdict's own tests (set per job by the run, never by
default): `data["fail"]` raises with that message; `data["hang"]` never returns;
`data["grow_mb"]` allocates that much memory before the work (on the first
`data["grow_attempts"]` attempts only, when given).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import time
from typing import Any

import orjson

from ..processor import processor

__all__ = ["DIR_ENV", "MAX_STALLED_ENV", "exec_file", "process", "result_digest"]

DIR_ENV = "GLIDEMQ_CHAOS_DIR"
MAX_STALLED_ENV = "GLIDEMQ_CHAOS_MAX_STALLED"

_fd = -1
_fd_pid = -1
_runs = itertools.count(1)
_hold: list[bytearray] = []  # memory grown on purpose (data["grow_mb"])


def exec_file(directory: str, pid: int) -> str:
    """Path of the execution ledger of process `pid` under `directory`."""
    return os.path.join(directory, f"exec-{pid}.jsonl")


def result_digest(result: Any) -> str:
    """A short digest of a job's result, the same for the value the processor returned
    and for the one read back from the job's hash."""
    return hashlib.blake2b(
        orjson.dumps(result, option=orjson.OPT_SORT_KEYS), digest_size=8
    ).hexdigest()


def _record(event: str, job_id: str, **extra: Any) -> None:
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
        line = {"event": event, "job_id": job_id, "ts": time.time(), "pid": pid, **extra}
        os.write(_fd, orjson.dumps(line) + b"\n")


def _acked(job: Any, result: Any) -> None:
    run = result.get("run") if isinstance(result, dict) else None
    _record("acked", job.id, run=run)


def _listen(worker: Any) -> None:
    """Record every completion the worker was told the server stored."""
    worker.on("completed", _acked)


# A job may stall more than once in a run that kills several workers: let it come back
# instead of failing it on the second stall (a scenario may ask for the default's 1).
@processor(max_stalled_count=int(os.environ.get(MAX_STALLED_ENV) or 20), setup=_listen)
async def process(job: Any) -> dict[str, Any]:
    """Record the execution, sleep `ms`, return the job id, this pid and the run token."""
    token = f"{os.getpid()}-{next(_runs)}"
    _record("started", job.id, run=token, attempt=int(getattr(job, "attempts_made", 0) or 0))
    data = job.data if isinstance(job.data, dict) else {}
    grow = int(data.get("grow_mb", 0) or 0)
    if "grow_attempts" in data and int(getattr(job, "attempts_made", 0) or 0) >= int(
        data["grow_attempts"]
    ):
        grow = 0  # grows on its first attempts only
    if grow > 0:
        for _ in range(grow):  # page by page, so the RSS really grows
            _hold.append(bytearray(os.urandom(1) * (1 << 20)))
            await asyncio.sleep(0.01)
    if data.get("hang"):
        await asyncio.sleep(10**6)
    ms = float(data.get("ms", 0) or 0)
    if ms > 0:
        await asyncio.sleep(ms / 1000)
    if data.get("fail"):
        _record("raised", job.id, run=token)
        raise RuntimeError(str(data["fail"]))
    result = {"id": job.id, "pid": os.getpid(), "run": token}
    _record("processed", job.id, run=token, digest=result_digest(result))
    return result
