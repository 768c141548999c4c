"""Acceptance tests of `glidemq-run`: the real CLI in a subprocess against the session Valkey.

Each test starts its own supervisor on a queue of its own; the fixture processors live in
tests/fixtures/runtime_app.py and log one `run pid=<pid>` line per execution, which is how
the tests count executions per job exactly.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import valkey

from glidemq import Queue
from glidemq.runtime.config import ExitCode
from tests.helpers import wait_for

from .conftest import APP, CLIProcess, Launcher, executions, free_port, pending_entries, run_pids

_STARTED = re.compile(r"started worker slot (\d+) pid (\d+)")


async def add_jobs(queue: Queue[Any, Any], datas: list[dict[str, Any]], **opts: Any) -> list[str]:
    jobs = await queue.add_bulk([("job", data, opts or None) for data in datas])
    ids = [j.id for j in jobs if j is not None]
    assert len(ids) == len(datas)
    return ids


async def wait_finished(
    queue: Queue[Any, Any], completed: int, failed: int = 0, timeout: float = 30.0
) -> None:
    """Wait until completed + failed reach the expected total, then check each exactly."""

    async def done() -> bool:
        c = await queue.get_job_counts()
        return c.completed + c.failed >= completed + failed

    await wait_for(done, timeout=timeout, interval=0.1)
    c = await queue.get_job_counts()
    assert (c.completed, c.failed) == (completed, failed), c
    assert (c.waiting, c.active, c.delayed) == (0, 0, 0), c


async def drain(cli: CLIProcess, timeout: float = 20.0) -> None:
    """SIGTERM, then expect a clean exit."""
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(timeout) == ExitCode.OK


def _gone(pid: int) -> bool:
    """Whether `pid` exited (a zombie not reaped yet counts; it may be reaped meanwhile)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def started_order(cli: CLIProcess) -> list[int]:
    """Worker pids in the order the supervisor started them."""
    return [int(pid) for _, pid in _STARTED.findall(cli.stderr())]


async def result_pids(queue: Queue[Any, Any]) -> dict[str, int]:
    """Job id -> pid of the process that completed it (from the return value)."""
    return {j.id: int(j.returnvalue["pid"]) for j in await queue.get_jobs("completed")}


async def mid_job(
    raw: valkey.Valkey, queue: Queue[Any, Any], pid: int, within_ms: float
) -> list[str]:
    """Active jobs that process `pid` started (and logged) less than `within_ms` ago."""
    now_ms = time.time() * 1000
    recent = [
        job.id
        for job in await queue.get_jobs("active")
        if job.processed_on is not None and now_ms - job.processed_on < within_ms
    ]
    return [job_id for job_id, pids in run_pids(raw, queue, recent).items() if pids == [pid]]


# =========================================================================== throughput


async def test_procs_4_runs_20000_jobs_each_exactly_once(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    ids = await add_jobs(cli_queue, [{"i": i} for i in range(20_000)])
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 4, "--concurrency", 50),
    )
    workers = await cli.wait_workers(4)
    await wait_finished(cli_queue, 20_000, timeout=60)
    runs = run_pids(raw, cli_queue, ids)
    twice = {job_id: pids for job_id, pids in runs.items() if len(pids) != 1}
    assert not twice, f"{len(twice)} jobs did not run exactly once, e.g. {list(twice.items())[:5]}"
    assert {pids[0] for pids in runs.values()} == workers  # all four processes took jobs
    assert pending_entries(raw, cli_queue) == 0
    await drain(cli)


# =========================================================================== dead and hung workers


async def test_kill_9_child_is_replaced_and_no_job_is_lost(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    ids = await add_jobs(cli_queue, [{"sleep": 0.2} for _ in range(300)])
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", 10),
        *("--lock-duration", 2000, "--stalled-interval", 500),
    )
    before = await cli.wait_workers(2)

    async def some_done() -> bool:
        return (await cli_queue.get_job_counts()).completed >= 40

    await wait_for(some_done, timeout=20)
    victim = started_order(cli)[0]
    # Kill while the victim runs a job it logged and started < 80 ms ago (of 200): a kill between
    # one batch's completion and the next batch's log lines would leave it nothing to recover.
    await wait_for(
        lambda: mid_job(raw, cli_queue, victim, within_ms=80), timeout=20, interval=0.005
    )
    os.kill(victim, signal.SIGKILL)
    after = await cli.wait_workers(2, exclude={victim})
    assert after - before, "no replacement process appeared"
    assert f"pid {victim} died (signal SIGKILL)" in cli.stderr()

    await wait_finished(cli_queue, 300, timeout=30)
    runs = run_pids(raw, cli_queue, ids)
    assert all(len(pids) >= 1 for pids in runs.values())  # at-least-once, every job completed
    finished_by = await result_pids(cli_queue)
    recovered = [j for j, pids in runs.items() if victim in pids and finished_by[j] != victim]
    assert recovered, "the killed process had no job in flight that another one finished"
    assert pending_entries(raw, cli_queue) == 0
    await drain(cli)


async def test_stopped_child_is_killed_after_heartbeat_timeout_and_its_jobs_finish_elsewhere(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    ids = await add_jobs(cli_queue, [{"sleep": 0.5} for _ in range(60)])
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", 4, "--heartbeat-timeout", 2),
        *("--lock-duration", 2000, "--stalled-interval", 500),
    )
    await cli.wait_workers(2)

    async def both_busy() -> bool:
        return (await cli_queue.get_job_counts()).active >= 8

    await wait_for(both_busy, timeout=20)
    victim = started_order(cli)[0]
    await wait_for(
        lambda: mid_job(raw, cli_queue, victim, within_ms=250), timeout=20, interval=0.01
    )
    os.kill(victim, signal.SIGSTOP)  # teardown SIGKILLs it if the supervisor did not
    stopped_at = time.monotonic()
    await cli.wait_workers(2, exclude={victim}, timeout=20)
    assert _gone(victim), f"pid {victim} still runs"
    # heartbeat timeout (2 s) + SIGTERM-to-SIGKILL delay (3 s) + loop ticks
    assert time.monotonic() - stopped_at < 10
    assert re.search(rf"pid {victim} silent for [\d.]+ s: terminating", cli.stderr())

    await wait_finished(cli_queue, 60, timeout=30)
    runs = run_pids(raw, cli_queue, ids)
    finished_by = await result_pids(cli_queue)
    taken_over = [j for j, pids in runs.items() if victim in pids and finished_by[j] != victim]
    assert taken_over, "the stopped process held no job that another process completed"
    assert victim not in {finished_by[j] for j in taken_over}
    assert pending_entries(raw, cli_queue) == 0
    await drain(cli)


# =========================================================================== signals


async def test_sigterm_drains_in_flight_jobs_within_grace_and_loses_nothing(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    total = 60
    ids = await add_jobs(cli_queue, [{"sleep": 1 + (i % 2)} for i in range(total)])
    grace = 10
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", 5, "--grace", grace),
    )
    await cli.wait_workers(2)

    async def in_flight() -> bool:
        return (await cli_queue.get_job_counts()).active >= 10

    await wait_for(in_flight, timeout=20)
    sent = time.monotonic()
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(grace + 5) == ExitCode.OK
    assert time.monotonic() - sent < grace
    assert "SIGTERM: draining 2 processes" in cli.stderr()

    c = await cli_queue.get_job_counts()
    assert c.active == 0
    assert c.completed >= 10  # the jobs in flight at SIGTERM finished
    assert c.completed + c.waiting == total, c
    assert pending_entries(raw, cli_queue) == 0
    runs = executions(raw, cli_queue, ids)
    completed = {j.id for j in await cli_queue.get_jobs("completed")}
    assert all(runs[j] == 1 for j in completed)
    assert all(runs[j] == 0 for j in set(ids) - completed)


async def test_jobs_outliving_grace_are_handed_back_not_lost(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    await add_jobs(cli_queue, [{"sleep": 30} for _ in range(3)])
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 1, "--concurrency", 3, "--grace", 1),
    )
    await cli.wait_workers(1)

    async def all_running() -> bool:
        return (await cli_queue.get_job_counts()).active == 3

    await wait_for(all_running, timeout=20)
    sent = time.monotonic()
    cli.send(signal.SIGTERM)
    # the worker stops waiting after --grace and hands the jobs back itself: nothing is killed
    assert await cli.wait_exit(10) == ExitCode.OK
    assert time.monotonic() - sent < 4
    assert "SIGKILL" not in cli.stderr()
    c = await cli_queue.get_job_counts()
    assert (c.waiting, c.active, c.completed, c.failed) == (3, 0, 0, 0), c
    assert pending_entries(raw, cli_queue) == 0


@pytest.mark.parametrize("how", ["SIGQUIT", "second SIGINT"])
async def test_immediate_shutdown_exits_4_and_leaves_jobs_for_stall_recovery(
    how: str,
    run_cli: Launcher,
    cli_queue: Queue[Any, Any],
    raw: valkey.Valkey,
    valkey_server: Any,
) -> None:
    await add_jobs(cli_queue, [{"sleep": 30} for _ in range(4)])
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 1, "--concurrency", 4, "--grace", 30),
    )
    await cli.wait_workers(1)

    async def all_running() -> bool:
        return (await cli_queue.get_job_counts()).active == 4

    await wait_for(all_running, timeout=20)
    sent = time.monotonic()
    if how == "SIGQUIT":
        cli.send(signal.SIGQUIT)
    else:
        cli.send(signal.SIGINT)
        await cli.wait_log("SIGINT: draining")
        cli.send(signal.SIGINT)
    assert await cli.wait_exit(10) == ExitCode.IMMEDIATE
    assert time.monotonic() - sent < 10  # did not wait for the 30 s jobs nor the 30 s grace
    assert "immediate shutdown" in cli.stderr()
    assert "SIGKILL" not in cli.stderr()  # the worker obeyed, the supervisor had to kill nothing
    c = await cli_queue.get_job_counts()
    assert c.completed == 0 and c.failed == 0
    # nothing was dropped: the jobs are either handed back or still in the PEL for
    # stall recovery
    assert c.waiting + c.active == 4, c
    assert pending_entries(raw, cli_queue) == c.active


async def test_sighup_replaces_every_child_without_a_processing_gap(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", 10),
    )
    original = await cli.wait_workers(2)
    ids: list[str] = []
    stop = asyncio.Event()

    async def produce() -> None:  # a steady 50 jobs/s
        while not stop.is_set():
            job = await cli_queue.add("job", {})
            assert job is not None
            ids.append(job.id)
            await asyncio.sleep(0.02)

    producer = asyncio.create_task(produce())
    try:
        await asyncio.sleep(1.0)
        cli.send(signal.SIGHUP)
        replaced = await cli.wait_workers(2, exclude=original, timeout=20)
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await producer
    assert "SIGHUP: rolling restart to generation 1" in cli.stderr()
    assert not replaced & original

    await wait_finished(cli_queue, len(ids), timeout=20)
    runs = run_pids(raw, cli_queue, ids)
    assert all(len(pids) == 1 for pids in runs.values())  # a graceful roll runs nothing twice
    ran_on = {pids[0] for pids in runs.values()}
    assert ran_on & original and ran_on & replaced  # both generations did work
    finished = sorted(j.finished_on or 0 for j in await cli_queue.get_jobs("completed"))
    gaps = [b - a for a, b in itertools.pairwise(finished)]
    assert max(gaps) < 1000, f"processing stopped for {max(gaps)} ms during the restart"
    await drain(cli)


async def test_sighup_loads_new_code_and_keeps_old_processes_when_it_fails(
    run_cli: Launcher, cli_queue: Queue[Any, Any], tmp_path: Path, valkey_server: Any
) -> None:
    version = tmp_path / "version"
    version.write_text("v1")
    cli = run_cli(
        "tests.fixtures.reload_app:process",
        *("--queue", cli_queue.name, "--url", valkey_server.url, "--procs", 2),
        env={"RUNTIME_TEST_RELOAD_FILE": str(version)},
    )
    original = await cli.wait_workers(2)

    async def run_one() -> dict[str, Any]:
        job = await cli_queue.add("job", {})
        assert job is not None
        await wait_for(job.is_completed, timeout=10)
        done = await cli_queue.get_job(job.id)
        assert done is not None
        return dict(done.returnvalue)

    assert (await run_one())["version"] == "v1"

    version.write_text("broken")  # a bad deploy
    cli.send(signal.SIGHUP)
    await cli.wait_log("new code failed to start, keeping the running workers", count=2)
    assert "reload_app: this version does not import" in cli.stderr()
    await asyncio.sleep(0.5)
    assert cli.worker_pids() == original
    assert (await run_one())["version"] == "v1"  # still processing on the old code

    version.write_text("v2")  # the fix
    cli.send(signal.SIGHUP)
    await cli.wait_workers(2, exclude=original)
    result = await run_one()
    assert result["version"] == "v2" and result["pid"] not in original
    await drain(cli)


async def test_sigttin_adds_and_sigttou_retires_the_oldest_process(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url, "--procs", 3),
    )
    three = await cli.wait_workers(3)
    oldest = started_order(cli)[0]
    cli.send(signal.SIGTTIN)
    four = await cli.wait_workers(4)
    assert three < four
    assert "SIGTTIN: 4 processes" in cli.stderr()
    cli.send(signal.SIGTTOU)
    after = await cli.wait_workers(3, exclude={oldest})
    assert after == four - {oldest}
    assert f"retiring worker slot 0 pid {oldest}" in cli.stderr()
    await drain(cli)


# =========================================================================== refusing to start


def _failed_start(cli: CLIProcess) -> str:
    err = cli.stderr()
    assert "started worker" not in err, "a worker process was started"
    return err


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        pytest.param(
            ["tests.fixtures.broken_app:process", "--queue", "q", "--url", "{url}"],
            {},
            ["Traceback", "RuntimeError: broken_app fails at import on purpose"],
            id="import-error",
        ),
        pytest.param(
            [f"{APP}:nope", "--queue", "q", "--url", "{url}"],
            {},
            ["has no attribute 'nope'"],
            id="unknown-attribute",
        ),
        pytest.param(
            [f"{APP}:NOT_CALLABLE", "--queue", "q", "--url", "{url}"],
            {},
            ["not callable"],
            id="not-callable",
        ),
        pytest.param([APP, "--queue", "q", "--url", "{url}"], {}, ["MODULE:ATTR"], id="no-colon"),
        pytest.param([f"{APP}:record", "--url", "{url}"], {}, ["--queue"], id="no-queue"),
        pytest.param([f"{APP}:record", "--procs", "0"], {}, ["--procs"], id="procs-0"),
        pytest.param(
            [f"{APP}:record", "--log-format", "xml"], {}, ["--log-format"], id="log-format-xml"
        ),
        pytest.param(
            [f"{APP}:record", "--concurrency", "many"], {}, ["--concurrency"], id="concurrency"
        ),
        pytest.param(
            [f"{APP}:record", "--queue", "q", "--lock-duration", "50", "--url", "{url}"],
            {},
            ["--lock-duration: must be >= 100 ms"],
            id="lock-duration-too-small",
        ),
        pytest.param(  # valid for argparse, rejected by WorkerOptions in the probe
            [f"{APP}:record", "--queue", "q", "--concurrency", "200000", "--url", "{url}"],
            {},
            ["concurrency: must be between 1 and 100000"],
            id="concurrency-over-limit",
        ),
        pytest.param(
            [f"{APP}:record", "--queue", "q", "--url", "{url}", "--embedded"],
            {},
            ["--embedded", "--url"],
            id="url-and-embedded",
        ),
        pytest.param(
            [f"{APP}:record", "--queue", "q", "--url", "{url}"],
            {"GLIDEMQ_PROCS": "lots"},
            ["GLIDEMQ_PROCS"],
            id="env-procs",
        ),
        pytest.param(
            [f"{APP}:record", "--queue", "q", "--url", "{url}"],
            {"GLIDEMQ_MAX_MEMORY_PER_CHILD": "0"},
            ["--max-memory-per-child"],
            id="env-max-memory-0",
        ),
    ],
)
async def test_bad_input_exits_2_before_any_worker_starts(
    args: list[str],
    env: dict[str, str],
    expected: list[str],
    run_cli: Launcher,
    valkey_server: Any,
) -> None:
    cli = run_cli(*(a.replace("{url}", valkey_server.url) for a in args), env=env)
    assert await cli.wait_exit(20) == ExitCode.USAGE
    err = _failed_start(cli)
    for text in expected:
        assert text in err, f"{text!r} not in stderr:\n{err}"
    assert "error" in err.lower()


async def test_errors_name_the_problem_without_a_usage_dump_or_glidemq_internals(
    run_cli: Launcher, valkey_server: Any
) -> None:
    missing = run_cli("no_such_module_xyz", "--queue", "q", "--url", valkey_server.url)
    assert await missing.wait_exit(20) == ExitCode.USAGE
    err = _failed_start(missing)
    assert "no module named 'no_such_module_xyz'" in err and "PYTHONPATH" in err
    assert "Traceback" not in err

    typo = run_cli(f"{APP}:record", "--proc", "2")
    assert await typo.wait_exit(20) == ExitCode.USAGE
    err = typo.stderr().strip()
    assert err.splitlines() == [
        "glidemq-run: error: unrecognized arguments: --proc 2 (did you mean --procs?) "
        "(see glidemq-run -h)"
    ]

    broken = run_cli(
        "tests.fixtures.broken_app:process", "--queue", "q", "--url", valkey_server.url
    )
    assert await broken.wait_exit(20) == ExitCode.USAGE
    err = _failed_start(broken)
    assert "broken_app.py" in err and "RuntimeError" in err  # the user's own frames stay
    assert "glidemq/processor.py" not in err and "importlib" not in err


async def test_a_host_that_does_not_exist_fails_at_once_with_the_unreachable_code(
    run_cli: Launcher,
) -> None:
    cli = run_cli(
        f"{APP}:record",
        *("--queue", "q", "--url", "valkey://no-such-host.invalid:6379", "--connect-timeout", "60"),
    )
    assert await cli.wait_exit(30) == ExitCode.UNREACHABLE == 6
    err = _failed_start(cli)
    assert "no such host 'no-such-host.invalid'" in err
    assert "Valkey not reachable yet" not in err  # no retries for a name that does not exist


async def test_unreachable_server_gives_up_after_connect_timeout(
    run_cli: Launcher,
) -> None:
    cli = run_cli(
        f"{APP}:record",
        *("--queue", "q", "--url", "valkey://127.0.0.1:1", "--connect-timeout", "1.5"),
    )
    assert await cli.wait_exit(15) == ExitCode.UNREACHABLE
    elapsed = time.monotonic() - cli.started
    err = _failed_start(cli)
    assert "glidemq-run: error: cannot reach Valkey at valkey://127.0.0.1:1" in err
    assert "within 1.5 s" in err
    assert "Valkey not reachable yet" in err  # it retried before giving up
    assert 1.0 < elapsed < 10


async def test_workers_dying_at_boot_exit_3(
    run_cli: Launcher, tmp_path: Path, valkey_server: Any
) -> None:
    marker = tmp_path / "imported-once"
    cli = run_cli(
        "tests.fixtures.boot_fail_app:process",
        *("--queue", "q", "--url", valkey_server.url, "--procs", 2),
        env={"RUNTIME_TEST_BOOT_MARKER": str(marker)},
    )
    assert await cli.wait_exit(20) == ExitCode.BOOT
    err = cli.stderr()
    assert marker.exists()  # the probe imported it successfully
    assert "started worker" in err
    assert "worker failed to start" in err
    assert "refuses to load in a worker process" in err


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
async def test_version_and_help_exit_0(run_cli: Launcher, script: bool) -> None:
    version = run_cli("--version", script=script)
    helped = run_cli("--help", script=script)
    assert await version.wait_exit(15) == 0
    assert await helped.wait_exit(15) == 0
    assert re.fullmatch(r"glidemq-run \d+\.\d+\.\d+\S*\n", version.stdout())
    text = helped.stdout()
    assert "examples:" in text and "glidemq-run app:process --queue" in text
    for flag in ("--procs", "--concurrency", "--grace", "--max-jobs-per-child", "--metrics-port"):
        assert flag in text
    assert "GLIDEMQ_" in text


# =========================================================================== batches


async def test_batch_size_100_completes_10000_jobs_once_each(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    ids = await add_jobs(cli_queue, [{"i": i} for i in range(10_000)])
    cli = run_cli(
        f"{APP}:batch_record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", 2, "--batch-size", 100),
    )
    await cli.wait_workers(2)
    await wait_finished(cli_queue, 10_000, timeout=40)
    runs = executions(raw, cli_queue, ids)
    assert sorted(set(runs.values())) == [1]
    sample = raw.lrange(cli_queue.keys.log(ids[0]), 0, -1)
    assert re.fullmatch(rb"run pid=\d+ batch=100", sample[0]), sample
    await drain(cli)


async def test_batch_error_retries_only_the_failing_jobs(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    datas = [{"i": i, "fail": i % 10 == 3} for i in range(200)]
    ids = await add_jobs(cli_queue, datas, attempts=2)
    failing = {job_id for job_id, d in zip(ids, datas, strict=True) if d["fail"]}
    cli = run_cli(  # declared with @glidemq.processor(batch=True): no --batch-size needed
        f"{APP}:declared_batch",
        *("--queue", cli_queue.name, "--url", valkey_server.url, "--procs", 2),
    )
    await cli.wait_workers(2)
    await wait_finished(cli_queue, completed=180, failed=20, timeout=30)
    runs = executions(raw, cli_queue, ids)
    assert {runs[j] for j in failing} == {2}
    assert {runs[j] for j in set(ids) - failing} == {1}
    failed = await cli_queue.get_jobs("failed")
    assert {j.id for j in failed} == failing
    assert all(j.attempts_made == 2 and "asked to fail" in (j.failed_reason or "") for j in failed)
    await drain(cli)


# =========================================================================== observability


def _http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


async def test_metrics_endpoint_reports_totals_per_process_and_queue_counts(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--metrics-port", port),
    )
    workers = await cli.wait_workers(2)
    assert await asyncio.to_thread(_http_get, f"{base}/health") == (200, "ok\n")
    listening = [
        c.laddr
        for c in cli.process.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert [a.ip for a in listening] == ["127.0.0.1"]

    await add_jobs(cli_queue, [{} for _ in range(500)])
    await wait_finished(cli_queue, 500)
    q = re.escape(cli_queue.name)

    async def metrics_caught_up() -> str | None:
        status, text = await asyncio.to_thread(_http_get, f"{base}/metrics")
        assert status == 200
        done = re.search(r"^glidemq_jobs_completed_total 500$", text, re.M)
        counted = re.search(
            rf'^glidemq_queue_jobs{{queue="{q}",state="completed"}} 500$', text, re.M
        )
        return text if done and counted else None

    text = await wait_for(metrics_caught_up, timeout=15, interval=0.5)
    assert "# TYPE glidemq_jobs_completed_total counter" in text
    per_process = re.findall(
        r'^glidemq_process_jobs_completed{slot="(\d+)",pid="(\d+)"} (\d+)$', text, re.M
    )
    assert {int(pid) for _, pid, _ in per_process} == workers
    assert {int(slot) for slot, _, _ in per_process} == {0, 1}
    assert sum(int(n) for _, _, n in per_process) == 500
    assert re.search(r'^glidemq_process_rss_bytes{slot="0",pid="\d+"} [1-9]\d*$', text, re.M)
    states = set(re.findall(rf'^glidemq_queue_jobs{{queue="{q}",state="(\w+)"}}', text, re.M))
    assert {"waiting", "active", "completed", "failed"} <= states
    assert re.search(r"^glidemq_processes 2$", text, re.M)
    assert (await asyncio.to_thread(_http_get, f"{base}/nope"))[0] == 404
    await drain(cli)


async def test_embedded_server_and_json_logs_with_slot_and_pid(
    run_cli: Launcher, queue_name: str
) -> None:
    cli = run_cli(
        f"{APP}:record",
        *("--queue", queue_name, "--embedded", "--procs", 1, "--log-format", "json"),
    )
    (url,) = await cli.wait_log(r"glidemq-run: embedded Valkey at (valkey://127\.0\.0\.1:\d+)")
    (worker,) = await cli.wait_workers(1)
    async with Queue(queue_name, connection=url) as queue:
        job = await queue.add("job", {"say": "hello from a worker"})
        assert job is not None
        await wait_finished(queue, 1)
    await cli.wait_log("hello from a worker")
    servers = [c for c in cli.process.children() if "valkey" in c.name()]
    assert len(servers) == 1
    await drain(cli)
    assert not servers[0].is_running()  # the embedded server stopped with glidemq-run

    records = []
    for line in cli.stderr().splitlines():
        if line.startswith("glidemq-run: embedded Valkey at"):
            continue
        records.append(json.loads(line))  # every log line is one JSON object
    assert records and all({"ts", "level", "slot", "pid", "msg"} <= r.keys() for r in records)
    supervisor = [r for r in records if r["role"] == "supervisor"]
    assert supervisor and {r["pid"] for r in supervisor} == {cli.pid}
    assert {r["slot"] for r in supervisor} == {"-"}
    said = [r for r in records if r["msg"] == "hello from a worker"]
    assert len(said) == 1
    assert (said[0]["role"], said[0]["slot"], said[0]["pid"]) == ("worker", 0, worker)


async def test_environment_variables_configure_and_flags_override_them(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    from_env = run_cli(
        f"{APP}:record_sync",
        env={
            "GLIDEMQ_PROCS": "2",
            "GLIDEMQ_QUEUE": cli_queue.name,
            "GLIDEMQ_URL": valkey_server.url,
        },
    )
    overridden = run_cli(
        f"{APP}:record_sync",
        *("--procs", 1, "--url", valkey_server.url),
        env={
            "GLIDEMQ_PROCS": "3",
            "GLIDEMQ_QUEUE": cli_queue.name,
            "GLIDEMQ_URL": "valkey://127.0.0.1:1",
        },
    )
    env_workers = await from_env.wait_workers(2)
    flag_workers = await overridden.wait_workers(1)
    assert f"ready on {cli_queue.name}" in overridden.stderr()
    await add_jobs(cli_queue, [{"sleep": 0.05} for _ in range(60)])
    await wait_finished(cli_queue, 60)
    by_pid = await result_pids(cli_queue)
    assert set(by_pid.values()) <= env_workers | flag_workers
    assert set(by_pid.values()) & flag_workers  # the overridden one worked on the env's queue
    assert all(j.returnvalue["sync"] for j in await cli_queue.get_jobs("completed"))
    await drain(from_env)
    await drain(overridden)


# =========================================================================== recycling


async def test_max_jobs_per_child_recycles_processes(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    ids = await add_jobs(cli_queue, [{"sleep": 0.005} for _ in range(2000)])
    concurrency = 10
    cli = run_cli(
        f"{APP}:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 2, "--concurrency", concurrency, "--max-jobs-per-child", 200),
    )
    await cli.wait_workers(2)
    await wait_finished(cli_queue, 2000, timeout=40)
    runs = run_pids(raw, cli_queue, ids)
    twice = {j: pids for j, pids in runs.items() if len(pids) != 1}
    assert not twice, f"recycling is a graceful drain, yet some jobs ran twice: {twice}"
    per_pid: dict[int, int] = {}
    for pids in runs.values():
        per_pid[pids[0]] = per_pid.get(pids[0], 0) + 1
    assert len(per_pid) > 2, per_pid
    assert "recycling (max-jobs)" in cli.stderr()
    # a process stops taking jobs soon after it reached the limit: it finishes the jobs it
    # holds (about `concurrency`), it does not go on for a whole heartbeat interval
    assert max(per_pid.values()) <= 200 + 2 * concurrency, per_pid
    await drain(cli)


async def test_max_memory_per_child_recycles_a_leaking_process(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    cli = run_cli(
        f"{APP}:leaky",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 1, "--concurrency", 2, "--max-memory-per-child", 150),
    )
    (first,) = await cli.wait_workers(1)
    rss_mb = psutil.Process(first).memory_info().rss / 2**20
    assert rss_mb < 120, f"a fresh worker already uses {rss_mb:.0f} MB"
    await add_jobs(cli_queue, [{} for _ in range(300)])
    await cli.wait_log(rf"pid {first} recycling \(max-memory\)", timeout=20)
    await wait_finished(cli_queue, 300)
    second = await cli.wait_workers(1, exclude={first})
    assert set(second) != {first}
    by_pid = await result_pids(cli_queue)
    assert first in by_pid.values()
    await drain(cli)
