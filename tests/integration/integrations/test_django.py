"""The Django helper against a real Valkey: settings-driven connection, add / aadd and the
example project's views, and `manage.py glidemq_run` as a real subprocess that starts
glidemq-run, processes a job with the project's settings, keeps the URL out of every command
line, and drains on SIGTERM.

Sync helpers run in a thread here (`asyncio.to_thread`): valkey-glide reads every reply on
the event loop of the process's first client, and in this test session that loop must keep
running while another thread waits for a reply."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django", reason="django is not installed (it is in the dev extra)")
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import override_settings

from glidemq import GlideMQError, Queue, ValidationError
from glidemq.integrations import django as glidemq_django
from glidemq.integrations.django.management.commands.glidemq_run import run_environment
from tests.helpers import wait_for

PROJECT = Path(__file__).resolve().parents[3] / "examples" / "django_project"


@pytest.fixture(scope="module")
def django_ready(valkey_server: Any) -> Iterator[str]:
    """Django set up once for this module with the example project's apps and minimal
    settings pointing at the session's Valkey; yields the URL."""
    import django

    if str(PROJECT) not in sys.path:
        sys.path.insert(0, str(PROJECT))
    if not django_settings.configured:
        django_settings.configure(
            SECRET_KEY="test",
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF="mysite.urls",
            INSTALLED_APPS=["glidemq.integrations.django", "shop"],
            DATABASES={},
            SHOP_NAME="Test Shop",
            GLIDEMQ={"url": valkey_server.url, "queues": ["orders"]},
        )
        django.setup()
    yield valkey_server.url


@pytest.fixture
async def orders(django_ready: str) -> Any:
    async with Queue("orders", connection=django_ready) as queue:
        await queue.obliterate(force=True)
        yield queue
        await queue.obliterate(force=True)


def test_settings_are_checked(django_ready: str) -> None:
    s = glidemq_django.settings()
    assert s.queues == ("orders",)
    assert glidemq_django.connection().addresses[0][1] == int(django_ready.rsplit(":", 1)[1])
    with (
        override_settings(GLIDEMQ={"url": django_ready, "nope": 1}),
        pytest.raises(ValidationError, match="nope"),
    ):
        glidemq_django.settings()
    with (
        override_settings(GLIDEMQ={"url": django_ready, "url_file": "/x"}),
        pytest.raises(ValidationError, match="not both"),
    ):
        glidemq_django.settings()
    with (
        override_settings(GLIDEMQ={"url_file": "/nonexistent/url"}),
        pytest.raises(ValidationError, match="url_file"),
    ):
        glidemq_django.connection()


def test_url_file_is_read(django_ready: str, tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text(django_ready + "\n")
    with override_settings(GLIDEMQ={"url_file": str(secret)}):
        assert glidemq_django.connection().url == django_ready


async def test_add_and_aadd_reach_the_queue(orders: Queue[Any, Any]) -> None:
    job = await asyncio.to_thread(glidemq_django.add, "orders", "confirm", {"order_id": "a"})
    assert job is not None
    again = await asyncio.to_thread(glidemq_django.add, "orders", "confirm", {"order_id": "b"})
    assert again is not None and again.id != job.id
    other = await glidemq_django.aadd("orders", "confirm", {"order_id": "c"})
    assert other is not None
    assert (await orders.get_job_counts()).waiting == 3
    with pytest.raises(GlideMQError, match="use `await aadd"):
        glidemq_django.add("orders", "confirm", {})  # inside a running loop
    # One Producer (one connection) per queue and process, for sync and async adds alike.
    assert list(glidemq_django._producers) == ["orders"]
    assert glidemq_django._producers["orders"].reconnects == 0


async def test_example_views_enqueue(orders: Queue[Any, Any]) -> None:
    from django.test import AsyncClient, Client

    response = await asyncio.to_thread(
        Client().post, "/orders", '{"order_id": "o-1"}', content_type="application/json"
    )
    assert response.status_code == 202
    assert response.json() == {"id": "o-1", "added": True}
    retried = await asyncio.to_thread(
        Client().post, "/orders", '{"order_id": "o-1"}', content_type="application/json"
    )
    assert retried.json() == {"id": "o-1", "added": False}  # the order id is the job id
    async_response = await AsyncClient().post(
        "/orders-async", '{"order_id": "o-2"}', content_type="application/json"
    )
    assert async_response.json() == {"id": "o-2", "added": True}
    assert {j.id for j in await orders.get_jobs("waiting")} == {"o-1", "o-2"}


def test_run_environment_carries_the_url_and_options(django_ready: str) -> None:
    s = glidemq_django.Settings(url="valkey://:pw@h:1", run={"procs": 2, "sandbox": True})
    env = run_environment(s, {"GLIDEMQ_URL_FILE": "/old", "PATH": "/bin"})
    assert env["GLIDEMQ_URL"] == "valkey://:pw@h:1" and "GLIDEMQ_URL_FILE" not in env
    assert (env["GLIDEMQ_PROCS"], env["GLIDEMQ_SANDBOX"]) == ("2", "1")
    env = run_environment(glidemq_django.Settings(url_file="/run/secrets/u"), {})
    assert env["GLIDEMQ_URL_FILE"] == "/run/secrets/u" and "GLIDEMQ_URL" not in env
    with pytest.raises(ValidationError, match="GLIDEMQ"):
        run_environment(glidemq_django.Settings(run={"url": "valkey://x"}), {})


def test_dry_run_prints_no_url(django_ready: str, capsys: pytest.CaptureFixture[str]) -> None:
    with override_settings(GLIDEMQ={"url": django_ready, "processor": "shop.tasks:process"}):
        call_command("glidemq_run", "--queue", "orders", "--procs", "1", "--dry-run")
    printed = capsys.readouterr().out
    assert "shop.tasks:process --queue orders --procs 1" in printed
    assert "valkey://" not in printed


async def test_management_command_runs_glidemq_run_and_processes_a_job(
    valkey_server: Any, orders: Queue[Any, Any]
) -> None:
    job = await orders.add("confirm", {"order_id": "o-9"})
    assert job is not None
    env = {**os.environ, "VALKEY_URL": valkey_server.url, "PYTHONPATH": os.getcwd()}
    env.pop("GLIDEMQ_URL", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "glidemq_run",
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:

        async def done() -> bool:
            return await job.get_state() == "completed"

        await wait_for(done, timeout=60)
        finished = await orders.get_job(job.id)
        assert finished is not None
        assert finished.returnvalue == {"order_id": "o-9", "confirmed_by": "Example Shop"}
        # The command became glidemq-run (same pid), and no command line shows the URL.
        cmdline = (await asyncio.to_thread(Path(f"/proc/{proc.pid}/cmdline").read_bytes)).replace(
            b"\0", b" "
        )
        assert b"glidemq.runtime.cli" in cmdline and b"shop.tasks:process" in cmdline
        assert b"valkey://" not in cmdline
        proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, output.decode(errors="replace")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
