"""`glidemq-run MODULE` runs every task declared in a module, `MODULE:task` one, and the
schedules tasks declare are upserted once however many glidemq-run start."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from glidemq import Queue
from glidemq.runtime.config import ExitCode
from tests.helpers import wait_for, wait_state

from .conftest import Launcher
from .test_run import drain

TASKS = "tests.fixtures.tasks_app"


@pytest.fixture
async def other_queue(cli_queue: Queue[Any, Any]) -> Any:
    q: Queue[Any, Any] = Queue(f"{cli_queue.name}-other", connection=cli_queue.connection)
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()


@pytest.mark.parametrize("sandbox", [False, True], ids=["in-process", "sandbox"])
async def test_a_module_target_runs_every_task_of_every_queue(
    run_cli: Launcher,
    cli_queue: Queue[Any, Any],
    other_queue: Queue[Any, Any],
    valkey_server: Any,
    sandbox: bool,
) -> None:
    env = {"GLIDEMQ_TEST_TASKS_QUEUE": cli_queue.name}
    flags = ["--sandbox"] if sandbox else []
    cli = run_cli(TASKS, "--url", valkey_server.url, "--procs", 1, *flags, env=env)
    await cli.wait_workers(1)
    sent = await cli_queue.add("send", {"email": {"to": "ada@example.com"}, "urgent": True})
    counted = await cli_queue.add("count_words", {"text": "one two three"})
    archived = await other_queue.add("archive", {"path": "a/b"})
    bad = await cli_queue.add("send", {"email": {"subject": "no address"}})
    assert sent and counted and archived and bad
    for queue, job in ((cli_queue, sent), (cli_queue, counted), (other_queue, archived)):
        await wait_state(queue, job.id, "completed", timeout=20)
    await wait_state(cli_queue, bad.id, "failed", timeout=20)
    result = await cli_queue.get_result(sent.id)
    assert result["to"] == "ada@example.com" and result["urgent"] is True
    assert await cli_queue.get_result(counted.id) == 3
    assert await other_queue.get_result(archived.id) == "A/B"
    failed = await cli_queue.get_job(bad.id)
    assert failed is not None and "send.email.to" in (failed.failed_reason or "")
    await drain(cli)


async def test_a_task_target_runs_that_task_only(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    env = {"GLIDEMQ_TEST_TASKS_QUEUE": cli_queue.name}
    cli = run_cli(f"{TASKS}:count_words", "--url", valkey_server.url, "--procs", 1, env=env)
    await cli.wait_workers(1)
    counted = await cli_queue.add("count_words", {"text": "a b"})
    other = await cli_queue.add("send", {"email": {"to": "x"}})
    assert counted and other
    await wait_state(cli_queue, counted.id, "completed", timeout=20)
    await wait_state(cli_queue, other.id, "failed", timeout=20)
    stored = await cli_queue.get_job(other.id)
    assert stored is not None and "no task named 'send'" in (stored.failed_reason or "")
    await drain(cli)


async def test_a_module_without_tasks_is_a_usage_error(
    run_cli: Launcher, valkey_server: Any
) -> None:
    cli = run_cli("tests.fixtures.runtime_app", "--queue", "q", "--url", valkey_server.url)
    assert await cli.wait_exit(30) == ExitCode.USAGE
    assert "declares no @glidemq.task" in cli.stderr()


async def test_three_glidemq_run_upsert_one_schedule_that_fires_once_per_tick(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    env = {"GLIDEMQ_TEST_TASKS_QUEUE": cli_queue.name, "GLIDEMQ_TEST_TICK_EVERY": "1000"}
    clis = [
        run_cli(f"{TASKS}:tick", "--url", valkey_server.url, "--procs", 2, env=env)
        for _ in range(3)
    ]
    for cli in clis:
        await cli.wait_workers(2)
    schedulers = await cli_queue.get_job_schedulers()
    assert [s.name for s in schedulers] == ["tick"]
    assert schedulers[0].every_ms == 1000

    async def ticks() -> int:
        return len(await cli_queue.get_jobs(["completed"]))

    await wait_for(lambda: _at_least(ticks, 4), timeout=20)
    await asyncio.sleep(0.1)
    done = await cli_queue.get_jobs(["completed", "failed"])
    assert all(j.state == "completed" for j in done), [j.failed_reason for j in done]
    # One job per tick: each job's id carries its planned run time, and the runs lie on one
    # grid of 1000 ms (a second upsert that replanned the schedule would put a run off it;
    # the first run may fire late, which moves no planned time).
    runs = sorted(int(j.id.rsplit("-", 1)[1]) for j in done)
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert gaps and all(g > 0 and g % 1000 == 0 for g in gaps), runs
    for cli in clis:
        await drain(cli)


async def _at_least(read: Any, n: int) -> bool:
    return bool(await read() >= n)
