"""`glidemq-run MODULE` runs durable workflows: 40 runs of the charge / sleep / wait for
"shipped" / label workflow on 2 processes of concurrency 5, both processes SIGKILLed while
the runs sleep. Every run finishes with the right result, every step's function ran exactly
once (counted in a file outside glidemq), the sleepers held no slot (a plain task ran
meanwhile, and 40 slept on 10 slots), and the events sent before the runs waited were kept."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from glidemq import Queue
from tests.fixtures import durable_app
from tests.helpers import wait_for, wait_state

from .conftest import Launcher
from .test_run import drain

APP = "tests.fixtures.durable_app"
RUNS = 40
SLEEP_S = 12  # long enough to see all 40 asleep, run plain jobs and replace both processes


async def _states(queue: Queue[Any, Any], ids: list[str]) -> collections.Counter[str]:
    jobs = await asyncio.gather(*(queue.get_job(i) for i in ids))
    return collections.Counter(j.state if j is not None else "gone" for j in jobs)


@pytest.mark.slow
async def test_forty_workflows_survive_both_processes_killed_in_their_sleep(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any, tmp_path: Path
) -> None:
    log = tmp_path / "side-effects.log"
    env = {
        "GLIDEMQ_TEST_DURABLE_QUEUE": cli_queue.name,
        "GLIDEMQ_TEST_DURABLE_SLEEP": str(SLEEP_S),
        "GLIDEMQ_TEST_DURABLE_LOG": str(log),
    }
    cli = run_cli(
        APP, "--url", valkey_server.url, "--procs", 2, "--concurrency", 5, env=env, script=True
    )
    first = await cli.wait_workers(2)
    wf = durable_app.fulfil
    orders = [f"o-{i}" for i in range(RUNS)]
    ids: list[str] = []
    early: list[str] = []
    for i, order in enumerate(orders):
        job = await cli_queue.add(wf.name, wf.payload(order), wf.options)
        assert job is not None
        ids.append(job.id)
        if i % 2 == 0:  # before the run reaches its wait (it has not even slept yet)
            state = await cli_queue.signal(job.id, "shipped", {"carrier": "dhl"})
            assert state in ("waiting", "active", "delayed"), state
            early.append(job.id)

    async def all_asleep() -> bool:
        return (await _states(cli_queue, ids))["delayed"] == RUNS

    await wait_for(all_asleep, timeout=SLEEP_S / 2)
    # 40 runs asleep on 10 slots: none holds one; a plain task runs at once meanwhile
    plain = await cli_queue.add(durable_app.ping.name, durable_app.ping.payload(7))
    assert plain is not None
    await wait_state(cli_queue, plain.id, "completed", timeout=SLEEP_S / 4)
    counts = await cli_queue.get_job_counts()
    assert counts.active == 0 and counts.delayed == RUNS, counts
    asleep = await cli_queue.get_job(ids[0])
    assert asleep is not None and [s.status for s in asleep.steps] == ["done", "sleeping"]
    sleepers = await asyncio.gather(*(cli_queue.get_job(i) for i in ids))
    wakes = [j.steps[1].until for j in sleepers if j is not None and len(j.steps) == 2]
    assert len(wakes) == RUNS and all(w is not None for w in wakes)

    for pid in first:  # both worker processes, in the middle of the sleep
        os.kill(pid, signal.SIGKILL)
    await cli.wait_log(r"died \(signal SIGKILL\)", count=2)
    assert (await _states(cli_queue, ids))["delayed"] == RUNS  # killed while all slept
    await cli.wait_workers(2, exclude=first, timeout=30)

    late = [i for i in ids if i not in early]

    async def waiting_for_the_event() -> bool:
        states = await _states(cli_queue, late)
        return states["suspended"] == len(late)

    await wait_for(waiting_for_the_event, timeout=SLEEP_S + 30)
    for job_id in late:
        assert await cli_queue.signal(job_id, "shipped", {"carrier": "ups"}) == "waiting"

    async def all_done() -> bool:
        return (await _states(cli_queue, ids))["completed"] == RUNS

    await wait_for(all_done, timeout=30)
    for i, job_id in enumerate(ids):
        job = await cli_queue.get_job(job_id)
        assert job is not None
        carrier = "dhl" if job_id in early else "ups"
        order = orders[i]
        assert job.returnvalue == {
            "charge": {"order": order, "cents": 100 * len(order)},
            "label": f"{order}/{carrier}",
        }
        assert [(s.name, s.status) for s in job.steps] == [
            ("charge", "done"),
            ("sleep", "done"),
            ("shipped", "done"),
            ("label", "done"),
        ]
        assert job.steps[1].finished_at == wakes[i]  # slept to its time, not less
    ran = collections.Counter(tuple(line.split()[:2]) for line in log.read_text().splitlines())
    assert ran == {(step, order): 1 for order in orders for step in ("charge", "label")}
    await drain(cli)


async def test_a_workflow_in_a_sandbox_child_fails_at_once_saying_why(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    env = {"GLIDEMQ_TEST_DURABLE_QUEUE": cli_queue.name}
    cli = run_cli(APP, "--url", valkey_server.url, "--procs", 1, "--sandbox", env=env)
    await cli.wait_workers(1)
    wf = durable_app.fulfil  # attempts=3, but no retry can help
    job = await cli_queue.add(wf.name, wf.payload("o-1"), wf.options)
    assert job is not None
    failed = await wait_state(cli_queue, job.id, "failed", timeout=30)
    assert "cannot run in a sandbox child" in (failed.failed_reason or "")
    assert failed.attempts_made == 1 and failed.steps == []
    await drain(cli)
