"""`glidemq-run` with a job that kills its worker process whenever it starts.

Held jobs start without a round trip, so the server learns of their starts from the calls
the worker makes anyway, before each run begins (glidemq/worker/starts.py). The poison job
is charged for every start and fails after max_stalled_count + 1 runs, with its worker's
death as the reason; the jobs held or started beside it are not charged for those deaths
and all complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from glidemq import Queue
from tests.helpers import wait_for

from .conftest import APP, Launcher

JOBS = 400


@pytest.mark.slow
@pytest.mark.parametrize("processor", ["poisoned", "poisoned_sync"])
async def test_a_job_that_kills_its_worker_fails_after_two_runs_and_the_rest_complete(
    run_cli: Launcher,
    cli_queue: Queue[Any, Any],
    valkey_server: Any,
    tmp_path: Path,
    processor: str,
) -> None:
    starts = tmp_path / "starts"
    jobs: list[tuple[str, dict[str, Any], None]] = [("job", {"sleep": 0.005}, None)] * JOBS
    jobs[JOBS // 2] = ("poison", {"poison": True}, None)
    added = await cli_queue.add_bulk(jobs)
    poison = added[JOBS // 2]
    assert poison is not None
    cli = run_cli(
        f"{APP}:{processor}",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", 4),
        *("--lock-duration", 3000, "--stalled-interval", 500),
        env={"RUNTIME_APP_STARTS": str(starts)},
    )
    await cli.wait_workers(2)

    async def finished() -> bool:
        c = await cli_queue.get_job_counts()
        return c.completed + c.failed == JOBS

    await wait_for(finished, timeout=120)
    counts = await cli_queue.get_job_counts()
    job = await cli_queue.get_job(poison.id)
    assert job is not None and job.state == "failed", job
    ran = starts.read_text().split()
    failed = {j.id: j for j in await cli_queue.get_jobs("failed")}
    beside = {i: (ran.count(i), j.failed_reason) for i, j in failed.items() if i != poison.id}
    assert not beside, f"jobs beside the poison failed (starts, reason): {beside}"
    assert counts.completed == JOBS - 1
    # max_stalled_count 1: one stall allowed, the second run's fails it
    assert ran.count(poison.id) == 2, f"the poison job ran {ran.count(poison.id)} times"
    assert (job.failed_reason or "").startswith("job stalled more than allowable limit"), job
    assert "worker process killed by SIGKILL while running" in (job.failed_reason or "")
    assert any("SIGKILL" in str(f.get("reason")) for f in job.failures), job.failures
