"""A worker process killed between its job's recorded start and the run: the run ledger
(glidemq/process/ledger.py) tells its supervisor the run never began, so the job goes back
uncharged and unsuspected; killed in the run, the job is unsure and suspect as before.

The worker runs in a forked process of tests/fixtures/ledger_fleet.py, which reads the
ledger once the worker is dead; the hand-back is the owner-mode reclaim glidemq-run uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from glidemq import ConnectionOptions, Queue
from glidemq.runtime.reclaim import Holding, reclaim

FLEET = Path(__file__).resolve().parents[2] / "fixtures" / "ledger_fleet.py"
CAUSE = "worker process killed by SIGKILL while running"


@pytest.mark.parametrize("where", ["active", "run"])
async def test_the_ledger_decides_whether_a_recorded_start_is_charged_or_suspect(
    valkey_server: Any, queue_name: str, where: str
) -> None:
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        # the first runs 0.2 s while the second waits held; its completion records the
        # second's start, and the second kills the process
        first = await queue.add("first", {"sleep": 0.2})
        second = await queue.add("second", {"die": True})
        consumer = f"ledger-{where}"
        out = subprocess.run(  # noqa: ASYNC221 - the test waits for this process alone
            [sys.executable, str(FLEET), valkey_server.url, queue_name, consumer, where],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["status"] == 9, out.stderr  # SIGKILL
        began = report["began"]
        assert began is not None
        stored = await queue.get_job(second.id)
        assert stored is not None and stored.state == "active"
        holding = Holding(
            queue_name, "glide", consumer, cause=CAUSE, began=tuple(began.get(consumer, ()))
        )
        conn = ConnectionOptions.from_url(valkey_server.url)
        assert await reclaim(conn, [holding]) == ([holding.key], 1, 0)

        assert (await queue.get_job(first.id)).state == "completed"  # type: ignore[union-attr]
        job = await queue.get_job(second.id)
        assert job is not None and job.state == "waiting" and job.stalled_count == 0
        ctx = await queue._context()
        suspect = await ctx.client.hget(queue.keys.job(second.id), "suspect")
        if where == "active":
            assert began.get(consumer, []) == []  # recorded, never begun
            assert job.failures == [] and suspect is None
        else:
            assert len(began[consumer]) == 1  # the run had begun: it may be the killer
            assert job.failures[-1]["reason"] == CAUSE + " (it may not have started)"
            assert suspect == b"1"
