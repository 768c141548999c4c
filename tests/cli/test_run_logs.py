"""glidemq-run's log speaks, at its default level: each failed try with job id, name, queue
and exception, the traceback once a job failed for good, repeats counted instead of
flooding, a worker process's death with the jobs it was running, and a lost connection and
its return. Read from the real output of a real glidemq-run; the JSON format carries the
same facts as fields."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from typing import Any

from glidemq import Queue
from glidemq.server import EmbeddedValkey
from glidemq.worker.report import BURST
from tests.helpers import wait_for, wait_state

from .conftest import Launcher, free_port
from .test_run import _http_get

APP = "tests.fixtures.logs_app"


async def test_failed_tries_are_logged_with_their_job_and_the_final_one_with_its_traceback(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    env = {"GLIDEMQ_TEST_LOGS_QUEUE": cli_queue.name}
    cli = run_cli(APP, "--url", valkey_server.url, "--procs", 1, env=env)
    await cli.wait_workers(1)
    job = await cli_queue.add("charge", {"invoice": 7}, {"attempts": 2})
    assert job is not None
    q = re.escape(repr(cli_queue.name))
    await cli.wait_log(
        rf"WARNING .*glidemq: job {job.id} \(charge\) of queue {q} failed \(try 1 of 2\): "
        r"PaymentDeclined: card declined for invoice 7; next try in \d+ ms"
    )
    await cli.wait_log(
        rf"ERROR .*glidemq: job {job.id} \(charge\) of queue {q} failed for good "
        r"\(try 2 of 2\): PaymentDeclined: card declined for invoice 7\n"
        r"Traceback \(most recent call last\):\n(?:.*\n)*?.*logs_app\.py\", line \d+, in charge"
    )
    # Many jobs failing alike: a few lines, and the rest counted in one.
    more = [await cli_queue.add("charge", {"invoice": i}, {"attempts": 1}) for i in range(25)]
    for added in more:
        assert added is not None
        await wait_state(cli_queue, added.id, "failed", timeout=20)
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(30) == 0
    log = cli.stderr()
    logged = len(re.findall(r"\(charge\) of queue .* failed for good", log))
    counted = [int(n) for n in re.findall(r"glidemq: (\d+) more failures of job 'charge'", log)]
    assert counted, log[-3000:]
    assert logged + sum(counted) == 26, (logged, counted)
    assert logged <= 3 * BURST  # the 26 fit in a few windows on any machine
    # The final count says what it counts: tries, as the worker processes reported them.
    assert (
        "stopped after 0 restarts; the worker processes reported 0 jobs completed and 27 "
        "failed tries (a process that was killed did not report its last second)"
    ) in log


async def test_the_json_log_carries_the_facts_of_a_failure_as_fields(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    env = {"GLIDEMQ_TEST_LOGS_QUEUE": cli_queue.name}
    cli = run_cli(APP, "--url", valkey_server.url, "--log-format", "json", env=env)
    await cli.wait_log(r'"msg": ?"worker slot 0 pid \d+ ready on')
    job = await cli_queue.add("charge", {"invoice": 9}, {"attempts": 1})
    assert job is not None
    await cli.wait_log(r'"event": ?"job_failed"')
    lines = [json.loads(line) for line in cli.stderr().splitlines() if line.startswith("{")]
    failed = next(r for r in lines if r.get("event") == "job_failed")
    assert failed["level"] == "error" and failed["role"] == "worker"
    expected = {"job_id": job.id, "job_name": "charge", "queue": cli_queue.name}
    assert {k: failed[k] for k in expected} == expected
    assert (failed["attempt"], failed["attempts"]) == (1, 1)
    assert failed["exception"] == "PaymentDeclined"
    assert failed["error"] == "card declined for invoice 9"
    assert "in charge" in failed["exc"]


async def test_a_killed_worker_process_is_logged_with_the_jobs_it_was_running(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    port = free_port()
    env = {"GLIDEMQ_TEST_LOGS_QUEUE": cli_queue.name}
    cli = run_cli(APP, "--url", valkey_server.url, "--procs", 1, "--metrics-port", port, env=env)
    (pid,) = await cli.wait_workers(1)
    job = await cli_queue.add("hang", {"tag": "x"})
    assert job is not None
    await wait_state(cli_queue, job.id, "active", timeout=20)

    async def supervisor_knows() -> bool:  # a heartbeat with the job reached the supervisor
        _, text = await asyncio.to_thread(_http_get, f"http://127.0.0.1:{port}/metrics")
        return "glidemq_jobs_active 1" in text

    await wait_for(supervisor_knows, timeout=20)
    os.kill(pid, signal.SIGKILL)
    await cli.wait_log(
        rf"WARNING .*worker slot 0 pid {pid} died \(signal SIGKILL\); replacing it [^;]*; "
        rf"it was running 1 job\(s\) at its last report [\d.]+ s earlier: "
        rf"{re.escape(cli_queue.name)}:{job.id} \(hang\)"
    )


async def test_a_lost_connection_and_its_return_are_logged(
    run_cli: Launcher, tmp_path: Any
) -> None:
    port = free_port()
    server = EmbeddedValkey(port=port).start()
    try:
        cli = run_cli(APP, "--url", server.url, "--procs", 1)
        await cli.wait_workers(1)
        server.stop()
        where = re.escape(f"127.0.0.1:{port}")
        await cli.wait_log(
            rf"WARNING .*of queue 'logs-app' lost its connection to {where} at \d\d:\d\d:\d\d: ", 30
        )
        assert "again, after" not in cli.stderr()  # the server is still down
        server = EmbeddedValkey(port=port).start()
        await cli.wait_log(
            rf"WARNING .*of queue 'logs-app' is connected to {where} again, after [\d.]+ s "
            r"\(lost at \d\d:\d\d:\d\d\)",
            60,
        )
        assert len(re.findall("lost its connection", cli.stderr())) == 1  # once per outage
    finally:
        server.stop()
