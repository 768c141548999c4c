"""Completing a job twice is impossible: a completion (or failure) that arrives after stall
recovery took the job away is a no-op on the server, and the worker says so in one line.

First at the library level (FCALLs with the entry ids of two consumers), then end to end: a
worker process frozen with SIGSTOP mid-job, the job taken over and completed by another
worker, then the frozen worker let go to deliver its late result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.client.context import now_ms
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[3]
LATE_WORKER = ROOT / "tests" / "fixtures" / "late_worker.py"
LOCK_MS = 1000
STALLED_INTERVAL_MS = 300
STALE_LINE = "was reclaimed by another worker; result dropped"


async def _fetch_one(queue: Queue[Any, Any], consumer: str) -> str:
    """Take one job as `consumer`; its stream entry id."""
    ctx = await queue._context()
    reply = await ctx.fcall(
        "glidemq_completeAndFetchNext", ctx.fetch_keys, [str(now_ms()), consumer, "1", "1", "0"]
    )
    flat = reply[1]
    assert len(flat) == 3, reply
    return str(flat[0].decode())


async def _complete(
    queue: Queue[Any, Any], consumer: str, job_id: str, entry_id: str, rv: dict[str, str]
) -> str:
    ctx = await queue._context()
    reply = await ctx.fcall(
        "glidemq_completeAndFetchNext",
        ctx.fetch_keys,
        [str(now_ms()), consumer, "0", "1", "1", job_id, entry_id, orjson.dumps(rv), "-1", "0"],
    )
    return str(reply[0][0].decode())


async def _completed_events(queue: Queue[Any, Any], job_id: str) -> int:
    ctx = await queue._context()
    entries = await ctx.client.custom_command(["XRANGE", queue.keys.events, "-", "+"])
    count = 0
    for pairs in (entries or {}).values():  # {entry id: [[field, value], ...]}
        fields = {bytes(k): bytes(v) for k, v in pairs}
        if fields.get(b"event") == b"completed" and fields.get(b"jobId") == job_id.encode():
            count += 1
    return count


async def test_late_completion_of_a_reclaimed_job_is_a_no_op(queue: Queue[Any, Any]) -> None:
    job = await queue.add("x", {"n": 1})
    assert job is not None
    ctx = await queue._context()
    await ctx.client.custom_command(["XGROUP", "CREATE", queue.keys.stream, "workers", "0"])
    first = await _fetch_one(queue, "frozen")
    k = queue.keys
    # The first consumer stops renewing; stall recovery (min idle 0 here) takes the job back.
    reclaimed = await ctx.fcall(
        "glidemq_reclaimStalled",
        [k.stream, k.failed, k.events, k.scheduled, k.meta],
        [str(now_ms()), "rescuer", "0", "0-0", "100", "5", "1", "-1", "0", "0"],
    )
    assert int(reclaimed[1]) == 1
    second = await _fetch_one(queue, "rescuer")
    assert second != first
    assert await _complete(queue, "rescuer", job.id, second, {"by": "rescuer"}) == "ok"
    done = await queue.get_job(job.id)
    assert done is not None and done.state == "completed"

    # The frozen consumer wakes up and reports, by every path: all refused.
    assert await _complete(queue, "frozen", job.id, first, {"by": "frozen"}) == "stale"
    failed = await ctx.fcall(
        "glidemq_fail",
        ctx.fail_keys,
        [str(now_ms()), "1", job.id, first, "late failure", "-1", "-1", "0", "0", ""],
    )
    assert failed == b"stale"

    after = await queue.get_job(job.id)
    assert after is not None
    assert after.state == "completed"
    assert after.returnvalue == {"by": "rescuer"}
    assert after.finished_on == done.finished_on
    assert after.failed_reason in (None, "")
    counts = await queue.get_job_counts()
    assert (counts.completed, counts.failed, counts.active, counts.waiting) == (1, 0, 0, 0)
    assert await _completed_events(queue, job.id) == 1


class LateWorker:
    """tests/fixtures/late_worker.py in a subprocess, its output in a file."""

    def __init__(self, conn: ConnectionOptions, queue_name: str, hold: float, out: Path) -> None:
        self.out = out
        self._file = out.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(LATE_WORKER), conn.url, queue_name, str(hold), str(LOCK_MS)],
            cwd=ROOT,
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self._file.flush()
        return self.out.read_text(errors="replace")

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._file.close()


async def test_frozen_worker_late_completion_is_dropped_with_one_log_line(
    queue: Queue[Any, Any], conn: ConnectionOptions, tmp_path: Path
) -> None:
    job = await queue.add("slow", {"n": 1})
    assert job is not None
    late = LateWorker(conn, queue.name, 1.0, tmp_path / "late_worker.out")
    try:
        await wait_for(lambda: f"started {job.id}" in late.output(), timeout=30, interval=0.01)
        os.kill(late.proc.pid, signal.SIGSTOP)  # frozen mid-job: no lock renewal, no result
        frozen_at = time.time()
        runs: list[int] = []

        async def rescue(j: Job[Any, Any]) -> dict[str, str]:
            runs.append(os.getpid())
            return {"by": "rescuer"}

        async with Worker(
            queue.name,
            rescue,
            connection=conn,
            lock_duration=LOCK_MS,
            stalled_interval=STALLED_INTERVAL_MS,
            block_timeout=500,
        ):

            async def rescued() -> Any:
                stored = await queue.get_job(job.id)
                return stored if stored is not None and stored.state == "completed" else None

            done = await wait_for(rescued, timeout=15)
        # taken over once its lock expired, not before
        assert done.finished_on / 1000 - frozen_at >= LOCK_MS / 1000 - 0.35
        assert runs == [os.getpid()]
        assert done.returnvalue == {"by": "rescuer"}

        late.proc.send_signal(signal.SIGCONT)  # its sleep is over: it completes at once
        await wait_for(lambda: STALE_LINE in late.output(), timeout=15)
        output = late.output()
        assert f"returning {job.id}" in output
        assert output.count(STALE_LINE) == 1
        assert f"job {job.id} {STALE_LINE}" in output

        after = await queue.get_job(job.id)
        assert after is not None
        assert after.state == "completed"
        assert after.returnvalue == {"by": "rescuer"}
        assert after.finished_on == done.finished_on
        lines, _ = await queue.get_job_logs(job.id)
        assert lines[0] == f"started pid={late.proc.pid}" and len(lines) == 1
        counts = await queue.get_job_counts()
        assert (counts.completed, counts.active, counts.waiting, counts.failed) == (1, 0, 0, 0)
        assert await _completed_events(queue, job.id) == 1
    finally:
        late.cleanup()
