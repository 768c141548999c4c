"""glidemq-run keeps the Valkey password out of what other local users can read
(/proc/PID/cmdline and /proc/PID/environ of the supervisor, the workers, the sandbox fork
servers and children), takes it from GLIDEMQ_URL or --url-file, warns when it is given in
--url, and takes TLS settings as flags."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from glidemq import ConnectionOptions, Queue
from glidemq.runtime.config import ExitCode
from glidemq.server.valkey import EmbeddedValkey
from tests.helpers import wait_for
from tests.secrets_check import exposed, password_server, process_tree
from tests.tls import Certs, ensure_stunnel, make_certs, stunnel

from .conftest import CLIProcess, Launcher

APP = "tests.fixtures.sandbox_procs:echo"
JOBS = 12


@pytest.fixture
def secured() -> Iterator[tuple[EmbeddedValkey, str]]:
    with password_server() as pair:
        yield pair


async def _run_and_check(cli: CLIProcess, queue: Queue[Any, Any], secret: str) -> None:
    """Run JOBS jobs through the fleet, then check that no process of it shows `secret`."""
    await queue.add_bulk([("j", i) for i in range(JOBS)])

    async def done() -> bool:
        if cli.popen.poll() is not None:
            raise AssertionError(f"glidemq-run exited {cli.popen.poll()}:\n{cli.stderr()}")
        return (await queue.get_job_counts()).completed == JOBS

    await wait_for(done, timeout=60, interval=0.2)

    def whole_fleet() -> list[psutil.Process]:
        tree = process_tree(cli.pid)
        names = [p.name() for p in tree]
        # both workers with their fork server (one each) and sandbox children
        full = names.count("glidemq-forksrv") == 2 and names.count("glidemq-sandbox") >= 4
        return tree if full else []

    tree = await wait_for(whole_fleet, timeout=30, interval=0.2)
    leaks = {f"{p.pid} {p.name()}": exposed(p, secret) for p in tree}
    assert not any(leaks.values()), leaks
    assert secret not in cli.stderr()
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(30) == ExitCode.OK


def _fleet_args(queue: Queue[Any, Any]) -> list[str]:
    return [APP, "--queue", queue.name, "--procs", "2", "--concurrency", "2", "--sandbox"]


async def _queue(server: EmbeddedValkey, secret: str, name: str) -> Queue[Any, Any]:
    conn = ConnectionOptions.from_url(server.url, password=secret)
    return Queue(name, connection=conn)


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
async def test_password_from_glidemq_url_reaches_no_process(
    run_cli: Launcher, secured: tuple[EmbeddedValkey, str], queue_name: str, script: bool
) -> None:
    server, secret = secured
    url = f"valkey://:{secret}@{server.host}:{server.port}"
    queue = await _queue(server, secret, queue_name)
    try:
        cli = run_cli(*_fleet_args(queue), env={"GLIDEMQ_URL": url}, script=script)
        await _run_and_check(cli, queue, secret)
        assert "warning" not in cli.stderr().lower()
    finally:
        await queue.close()


async def test_password_in_url_flag_warns_once_and_reaches_no_process(
    run_cli: Launcher, secured: tuple[EmbeddedValkey, str], queue_name: str
) -> None:
    server, secret = secured
    url = f"valkey://:{secret}@{server.host}:{server.port}"
    queue = await _queue(server, secret, queue_name)
    try:
        cli = run_cli(*_fleet_args(queue), "--url", url)
        await _run_and_check(cli, queue, secret)
        warnings = [line for line in cli.stderr().splitlines() if "warning" in line]
        assert len(warnings) == 1, cli.stderr()
        assert warnings[0].startswith("glidemq-run: warning: the password in --url")
        assert "GLIDEMQ_URL" in warnings[0]
        assert "--url-file" in warnings[0]
    finally:
        await queue.close()


async def test_url_file_carries_the_password(
    run_cli: Launcher, secured: tuple[EmbeddedValkey, str], queue_name: str, tmp_path: Path
) -> None:
    server, secret = secured
    url_file = tmp_path / "valkey-url"
    url_file.write_text(f"valkey://:{secret}@{server.host}:{server.port}\n")
    url_file.chmod(0o600)
    queue = await _queue(server, secret, queue_name)
    try:
        cli = run_cli(*_fleet_args(queue), "--url-file", url_file)
        await _run_and_check(cli, queue, secret)
        assert "warning" not in cli.stderr().lower()
    finally:
        await queue.close()


async def test_bad_url_file_is_a_usage_error(run_cli: Launcher, tmp_path: Path) -> None:
    cli = run_cli(APP, "--queue", "q", "--url-file", tmp_path / "missing")
    assert await cli.wait_exit(20) == ExitCode.USAGE
    assert "--url-file" in cli.stderr() and "missing" in cli.stderr()
    both = run_cli(APP, "--queue", "q", "--url-file", tmp_path / "x", "--url", "valkey://h")
    assert await both.wait_exit(20) == ExitCode.USAGE
    assert "not allowed with argument" in both.stderr()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    ensure_stunnel()
    return make_certs(tmp_path_factory.mktemp("pki"))


async def test_tls_flags_run_a_fleet_through_a_tls_endpoint(
    run_cli: Launcher, valkey_server: Any, pki: Certs, queue_name: str, tmp_path: Path
) -> None:
    backend = (valkey_server.host, valkey_server.port)
    with stunnel(ensure_stunnel(), pki, backend, tmp_path, client_ca=True) as port:
        queue: Queue[Any, Any] = Queue(queue_name, connection=valkey_server.url)
        try:
            await queue.add_bulk([("j", i) for i in range(JOBS)])
            cli = run_cli(
                *(APP, "--queue", queue_name, "--procs", "1", "--concurrency", "2"),
                *("--url", f"valkeys://127.0.0.1:{port}", "--tls-ca-file", pki.ca),
                *("--tls-cert-file", pki.client_cert, "--tls-key-file", pki.client_key),
            )

            async def done() -> bool:
                assert cli.popen.poll() is None, cli.stderr()
                return (await queue.get_job_counts()).completed == JOBS

            await wait_for(done, timeout=60, interval=0.2)
            cli.send(signal.SIGTERM)
            assert await cli.wait_exit(30) == ExitCode.OK
            insecure = run_cli(
                *(APP, "--queue", queue_name, "--procs", "1"),
                *("--url", f"valkeys://127.0.0.1:{port}", "--tls-insecure"),
            )  # no client certificate: the endpoint refuses it, the workers cannot start
            assert await insecure.wait_exit(60) == ExitCode.BOOT
            assert "client certificate" in insecure.stderr()
        finally:
            await queue.obliterate(force=True)
            await queue.close()
