"""Leases: a job a worker took but never started runs at most once, whatever froze.

A worker starts a job it took (held beyond its concurrency, or in a reply it reads late) with
no round trip only while its hold on the job is provably alive; after a freeze of the worker
or of the server it asks the server first, and a job another worker took over meanwhile is
dropped unrun. Only a job that was running at the freeze may run again (glidemq/worker/lease.py).
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.server.valkey import EmbeddedValkey
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[3]
HOLD_WORKER = ROOT / "tests" / "fixtures" / "hold_worker.py"
BLOCK_WORKER = ROOT / "tests" / "fixtures" / "block_worker.py"


def _status(path: Path) -> tuple[int, int]:
    try:
        tick, held = path.read_text().split()
    except (OSError, ValueError):
        return 0, -1
    return int(tick), int(held)


def _spawn(url: str, queue_name: str, ledger: Path, status: Path, log: Path) -> Any:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(HOLD_WORKER), url, queue_name, str(ledger), str(status)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _spawn_block(url: str, queue_name: str, ledger: Path, status: Path, log: Path) -> Any:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(BLOCK_WORKER), url, queue_name, str(ledger), str(status), "2.5"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def test_a_frozen_worker_does_not_start_jobs_taken_over_while_it_was_stopped(
    standalone_conn: ConnectionOptions, queue_name: str, tmp_path: Path
) -> None:
    ledger, status = tmp_path / "ledger", tmp_path / "status"
    runs_b: list[str] = []

    async def work_b(job: Job[Any, None]) -> None:
        runs_b.append(job.id)
        await asyncio.sleep(0.002)

    async with Queue(queue_name, connection=standalone_conn) as queue:
        await queue.add_bulk([{"name": "j", "data": {}} for _ in range(3000)])
        proc = _spawn(standalone_conn.url, queue_name, ledger, status, tmp_path / "worker.log")
        try:
            # A runs alone until it holds jobs beyond its concurrency of 1, then is frozen.
            await wait_for(lambda: ledger.exists() and len(ledger.read_text().split()) >= 200,
                           timeout=30)  # fmt: skip
            await wait_for(lambda: _status(status)[1] > 1, timeout=10)
            os.kill(proc.pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            before = set(ledger.read_text().split())
            held_at_stop = _status(status)[1]
            worker_b = Worker(
                queue_name, work_b, connection=standalone_conn, concurrency=1,
                lock_duration=1000, stalled_interval=200, block_timeout=500,
            )  # fmt: skip
            async with worker_b:
                # B recovers what A holds (after lock_duration), then A is resumed.
                await wait_for(lambda: time.monotonic() - frozen_at > 4, timeout=10)
                os.kill(proc.pid, signal.SIGCONT)
                tick = _status(status)[0]

                async def settled() -> bool:
                    counts = await queue.get_job_counts()
                    t, held = _status(status)
                    return counts.completed == 3000 and t > tick + 5 and held == 0

                await wait_for(settled, timeout=60)
        finally:
            proc.kill()
            proc.wait()
        runs_a = ledger.read_text().split()
        counted = collections.Counter(runs_a + runs_b)
        twice = {job_id for job_id, n in counted.items() if n > 1}
        assert held_at_stop > 1, "A held no job beyond the one running at the stop"
        assert len(counted) == 3000, f"{3000 - len(counted)} jobs never ran"
        # Only jobs A had started may run again: the one running at the stop and, at
        # concurrency 1, the one it had just finished if the stop came before its completion
        # (sent with the next fetch) left the process. Held jobs never run twice.
        assert twice <= before, f"jobs A never started before the stop ran twice: {twice - before}"
        assert len(twice) <= 2, f"{len(twice)} jobs ran twice: {sorted(twice)}"
        await queue.obliterate(force=True)


async def test_a_stalled_server_makes_no_job_run_twice_that_had_not_started(
    queue_name: str,
) -> None:
    """The server is stopped for longer than lock_duration while two workers hold jobs:
    when it resumes, a worker's completions and its held jobs are not taken over by the
    other worker's stall scan. At most the jobs running at the stop run twice."""
    server = EmbeddedValkey().start()
    conn = ConnectionOptions.from_url(server.url)
    runs: collections.Counter[str] = collections.Counter()
    total = 8000

    async def work(job: Job[Any, None]) -> None:
        runs[job.id] += 1
        await asyncio.sleep(0.0005)

    try:
        async with Queue(queue_name, connection=conn) as queue:
            await queue.add_bulk([{"name": "j", "data": {}} for _ in range(total)])
            settings: dict[str, Any] = {
                "connection": conn, "concurrency": 2, "lock_duration": 3000,
                "stalled_interval": 300, "block_timeout": 500,
            }  # fmt: skip
            async with Worker(queue_name, work, **settings), Worker(queue_name, work, **settings):
                await wait_for(lambda: sum(runs.values()) >= 1500, timeout=60)
                assert server.pid is not None
                os.kill(server.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(4.0)  # the fault itself: a stall longer than the lock
                finally:
                    os.kill(server.pid, signal.SIGCONT)

                async def done() -> bool:
                    return (await queue.get_job_counts()).completed == total

                await wait_for(done, timeout=120)
        twice = sorted(job_id for job_id, n in runs.items() if n > 1)
        assert len(runs) == total, f"{total - len(runs)} jobs never ran"
        # Two workers at concurrency 2: at most the 4 jobs running at the stop may run again.
        assert len(twice) <= 4, f"{len(twice)} jobs ran twice: {twice[:20]}"
    finally:
        server.stop()


async def test_a_job_started_with_one_that_freezes_the_worker_does_not_run_after_the_freeze(
    standalone_conn: ConnectionOptions, queue_name: str, tmp_path: Path
) -> None:
    """One fetch brings two jobs and both start; the first blocks the worker's event loop
    for longer than the lock before the second's run gets control. Meanwhile another worker
    took both over. The second never ran in the frozen worker, so it must not run there
    after the freeze: the lease is checked where the run begins, not only where it was
    decided."""
    ledger, status = tmp_path / "ledger", tmp_path / "status"
    runs_b: list[str] = []

    async def work_b(job: Job[Any, None]) -> None:
        runs_b.append(job.id)

    async with Queue(queue_name, connection=standalone_conn) as queue:
        block, victim = await queue.add_bulk([("block", {}, None), ("victim", {}, None)])
        assert block is not None and victim is not None
        proc = _spawn_block(standalone_conn.url, queue_name, ledger, status, tmp_path / "log")
        try:
            await wait_for(lambda: ledger.exists() and "block" in ledger.read_text(), timeout=30)
            worker_b = Worker(
                queue_name, work_b, connection=standalone_conn, concurrency=2,
                lock_duration=1000, stalled_interval=200, block_timeout=500,
            )  # fmt: skip
            async with worker_b:
                await wait_for(lambda: victim.id in runs_b, timeout=30)
                await wait_for(lambda: "unblocked" in ledger.read_text(), timeout=30)
                tick = _status(status)[0]

                async def settled() -> bool:
                    t, held = _status(status)
                    return t > tick + 5 and held == 0 and block.id in runs_b

                await wait_for(settled, timeout=30)
        finally:
            proc.kill()
            proc.wait()
        runs_a = [line.split()[0] for line in ledger.read_text().splitlines()
                  if not line.endswith("unblocked")]  # fmt: skip
        assert runs_a.count(block.id) == 1 and runs_b.count(victim.id) == 1
        assert victim.id not in runs_a, "the job started beside the freeze ran after it"
        await queue.obliterate(force=True)
