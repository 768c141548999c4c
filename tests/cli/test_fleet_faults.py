"""`glidemq-run` under outside faults: worker processes SIGKILLed while jobs wait.

A worker killed after it became ready is replaced at once (no fleet-wide back-off), its
jobs come back from the replacement instead of waiting for stall recovery, and a clean stop
hands back what dead workers of this fleet still held.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import valkey

from glidemq import Queue
from glidemq.runtime.config import ExitCode
from glidemq.runtime.restarts import BOOT_LOOP_LIMIT
from tests.helpers import wait_for

from .conftest import APP, CLIProcess, Launcher, pending_entries


def _ready_workers(cli: CLIProcess) -> list[int]:
    return sorted(cli.worker_pids() & cli.ready_pids())


def _finished_on(raw: valkey.Valkey, queue: Queue[Any, Any], ids: list[str]) -> list[int]:
    pipe = raw.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(queue.keys.job(job_id), "finishedOn")
    return sorted(int(v) for v in pipe.execute() if v is not None)


async def test_kill_storm_replaces_ready_workers_at_once_and_completions_never_pause(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    # Modest but steady load: about 150 jobs/s of 20 ms each, for the whole storm.
    cli = run_cli(
        f"{APP}:storm",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 3, "--concurrency", 5),
        *("--lock-duration", 5000, "--stalled-interval", 1000),
    )
    await cli.wait_workers(3)
    ids: list[str] = []
    stop = asyncio.Event()

    async def produce() -> None:
        while not stop.is_set():
            jobs = await cli_queue.add_bulk([("job", {"sleep": 0.02}, None) for _ in range(15)])
            ids.extend(j.id for j in jobs if j is not None)
            await asyncio.sleep(0.1)

    producer = asyncio.create_task(produce())
    rng = random.Random(13)
    kills = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < 20:
            await asyncio.sleep(0.5)
            ready = _ready_workers(cli)
            if ready:
                try:
                    os.kill(rng.choice(ready), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass
    finally:
        stop.set()
        await producer
    assert kills >= 30, f"only {kills} kills: the fleet had no ready worker most of the time"

    async def all_done() -> bool:
        c = await cli_queue.get_job_counts()
        return c.completed + c.failed >= len(ids)

    await wait_for(all_done, timeout=60, interval=0.2)
    c = await cli_queue.get_job_counts()
    assert (c.completed, c.failed, c.waiting, c.active) == (len(ids), 0, 0, 0), c
    finished = _finished_on(raw, cli_queue, ids)
    assert len(finished) == len(ids)
    gaps = [b - a for a, b in itertools.pairwise(finished)]
    longest = max(gaps)
    print(f"kill storm: {kills} kills, {len(ids)} jobs, longest completion gap {longest} ms")
    assert longest < 2000, f"completions paused for {longest} ms during the kill storm"
    assert "replacing it now" in cli.stderr()
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(30) == ExitCode.OK
    assert pending_entries(raw, cli_queue) == 0


async def test_sigterm_after_kills_hands_back_the_dead_workers_jobs(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    jobs = await cli_queue.add_bulk([("job", {"sleep": 0.5}, None) for _ in range(400)])
    ids = [j.id for j in jobs if j is not None]
    # The default lock duration (30 s): nothing here is left to stall recovery.
    cli = run_cli(
        f"{APP}:storm",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 3, "--concurrency", 10, "--grace", 10),
    )
    await cli.wait_workers(3)

    async def busy() -> bool:
        return (await cli_queue.get_job_counts()).active >= 20

    await wait_for(busy, timeout=20)
    victims = _ready_workers(cli)[:2]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    await cli.wait_log(r"died \(signal SIGKILL\)", count=2)
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(30) == ExitCode.OK
    c = await cli_queue.get_job_counts()
    assert c.active == 0, c
    assert c.failed == 0, c
    assert c.completed + c.waiting == len(ids), c
    assert pending_entries(raw, cli_queue) == 0
    assert "SIGKILL" not in cli.stderr().split("SIGTERM: draining", 1)[1]


async def test_boot_crash_loop_after_the_fleet_was_ready_halts_with_exit_3(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "broken"
    cli = run_cli(
        "tests.fixtures.breakable_app:process",
        *("--queue", cli_queue.name, "--url", valkey_server.url, "--procs", 2),
        env={"RUNTIME_TEST_BREAK_MARKER": str(marker)},
    )
    workers = await cli.wait_workers(2)
    marker.write_text("broken")
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    assert await cli.wait_exit(60) == ExitCode.BOOT
    err = cli.stderr()
    assert "replacing it now" in err  # the killed ready workers were replaced at once
    assert f"failed to start {BOOT_LOOP_LIMIT} times in a row" in err
    assert "breakable_app is broken now" in err
