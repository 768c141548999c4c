"""glidemq-run: KeyboardInterrupt or SystemExit raised by a processor fails that job only
(the worker process stays, nothing counts as a crash); SIGINT and SIGTERM to the supervisor
still drain as documented. A server holding another project's `glidemq` library stops the
workers at boot (exit 3) and keeps that library."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import valkey

from glidemq import Queue
from glidemq.runtime.config import ExitCode
from tests.helpers import wait_for

from .conftest import Launcher, pending_entries

APP = "tests.fixtures.base_exception_app"


@pytest.mark.parametrize("attr", ["raising", "raising_sync"])
@pytest.mark.parametrize("sandbox", [False, True])
async def test_base_exception_in_a_glidemq_run_worker_fails_only_its_job(
    run_cli: Launcher,
    cli_queue: Queue[Any, Any],
    raw: valkey.Valkey,
    valkey_server: Any,
    attr: str,
    sandbox: bool,
) -> None:
    raising = [{"raise": "KeyboardInterrupt"}, {"raise": "SystemExit"}] * 3
    normal = [{"sleep": 0.3}] * 12
    jobs = await cli_queue.add_bulk([("j", data, {"timeout": 20_000}) for data in raising + normal])
    assert all(j is not None for j in jobs)
    cli = run_cli(
        f"{APP}:{attr}",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 1, "--concurrency", 4),
        *(["--sandbox"] if sandbox else []),
    )
    (pid,) = await cli.wait_workers(1)

    async def finished() -> bool:
        c = await cli_queue.get_job_counts()
        return c.completed + c.failed >= len(raising) + len(normal)

    await wait_for(finished, timeout=60, interval=0.1)
    c = await cli_queue.get_job_counts()
    assert (c.completed, c.failed) == (len(normal), len(raising)), c
    reasons = {j.failed_reason for j in await cli_queue.get_jobs("failed")}
    assert reasons == {
        "processor raised KeyboardInterrupt",
        "processor raised SystemExit: 3",
    }, reasons
    # the same worker process ran everything: no crash, no replacement
    assert cli.worker_pids() == {pid}
    assert "died" not in cli.stderr()
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(30) == ExitCode.OK
    assert pending_entries(raw, cli_queue) == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_real_signal_still_drains_running_jobs(
    run_cli: Launcher,
    cli_queue: Queue[Any, Any],
    raw: valkey.Valkey,
    valkey_server: Any,
    sig: signal.Signals,
) -> None:
    jobs = await cli_queue.add_bulk([("j", {"sleep": 1.5}, {"timeout": 20_000})] * 4)
    assert all(j is not None for j in jobs)
    cli = run_cli(
        f"{APP}:raising",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 1, "--concurrency", 4, "--grace", 20),
    )
    await cli.wait_workers(1)

    async def running() -> bool:
        return (await cli_queue.get_job_counts()).active == 4

    await wait_for(running, timeout=20, interval=0.05)
    cli.send(sig)
    assert await cli.wait_exit(30) == ExitCode.OK
    assert f"{sig.name}: draining" in cli.stderr()
    c = await cli_queue.get_job_counts()
    assert (c.completed, c.failed, c.active) == (4, 0, 0), c
    assert pending_entries(raw, cli_queue) == 0


async def test_glidemq_run_refuses_a_foreign_glidemq_library_at_boot(run_cli: Launcher) -> None:
    from glidemq.server.valkey import EmbeddedValkey
    from tests.integration.client.test_foreign_library import foreign, library_code

    server = EmbeddedValkey().start()
    try:
        src = foreign("93")
        server.execute("FUNCTION", "LOAD", src)
        cli = run_cli(f"{APP}:raising", *("--queue", "q", "--url", server.url, "--procs", 1))
        assert await cli.wait_exit(30) == ExitCode.BOOT
        assert "not glidemq for Python (version '93'" in cli.stderr()
        assert library_code(server) == src  # left as it was
        assert server.execute("DBSIZE") == 0
    finally:
        server.stop()
