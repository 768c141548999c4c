"""Fixtures for the dashboard tests: a queue with jobs in every state under a prefix of the
test's own, and an httpx client talking to the dashboard app in this process (ASGI)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from glidemq import FlowJob, FlowProducer, Job, Queue, UnrecoverableError, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

XSS_DATA = "<script>alert(1)</script>"
XSS_NAME = '"><img src=x onerror=alert(2)>'


def _ids(jobs: list[Any]) -> list[str]:
    return [j.id for j in jobs if j is not None]


@dataclass
class Populated:
    """What `populate` made: the prefix, the queue's name, and job ids by kind."""

    url: Any  # a URL, or ConnectionOptions for a cluster
    prefix: str
    name: str
    ids: dict[str, list[str]] = field(default_factory=dict)


async def populate(url: Any, prefix: str, name: str = "emails") -> Populated:
    """A queue with completed, failed, dead-letter, waiting, delayed, prioritized and
    waiting-children jobs, logs and progress, a scheduler, and a job whose name and data
    are HTML."""
    out = Populated(url, prefix, name)
    ids = out.ids
    async with Queue(name, connection=url, prefix=prefix) as q:
        good = await q.add_bulk([("welcome", {"to": f"user{i}@example.com"}) for i in range(3)])
        bad = await q.add_bulk([("bad", {"to": "nobody@example.com"}, {"attempts": 1})] * 2)
        ids["completed"] = _ids(good)
        ids["failed"] = _ids(bad)

        async def proc(job: Job[Any, Any]) -> Any:
            await job.log(f"sending to {job.data['to']}")
            await job.update_progress(40)
            if job.name == "bad":
                raise ValueError("mailbox unavailable")
            if job.name == "dead":
                raise UnrecoverableError("address rejected")
            await job.update_progress(100)
            return {"sent": job.data["to"]}

        async def finished(total: int) -> bool:
            c = await q.get_job_counts()
            return c.completed + c.failed + c.dead_letter >= total

        async with Worker(name, proc, connection=url, prefix=prefix, **FAST):
            await wait_for(lambda: finished(5), timeout=30)
        dead = await q.add("dead", {"to": "gone@example.com"})
        ids["dead_letter"] = [dead.id]
        async with Worker(name, proc, connection=url, prefix=prefix, dead_letter=True, **FAST):
            await wait_for(lambda: finished(6), timeout=30)
        waiting = await q.add_bulk([("welcome", {"to": f"later{i}@example.com"}) for i in range(2)])
        xss = await q.add(XSS_NAME, {"note": XSS_DATA, "attr": XSS_NAME})
        ids["waiting"] = [*_ids(waiting), xss.id]
        ids["xss"] = [xss.id]
        delayed = await q.add("reminder", {"to": "soon@example.com"}, {"delay": 3_600_000})
        ids["delayed"] = [delayed.id]
        prio = await q.add("digest", {"to": "weekly@example.com"}, {"priority": 5})
        ids["prioritized"] = [prio.id]
        await q.upsert_job_scheduler(
            "nightly-report", cron="0 3 * * *", template={"name": "report", "data": {}}
        )
    async with FlowProducer(connection=url, prefix=prefix) as flows:
        node = await flows.add(
            FlowJob("bundle", name, {"part": "parent"}, children=[FlowJob("part", name, {"n": 1})])
        )
        ids["parent"] = [node.job.id]
        ids["child"] = [node.children[0].job.id]
        ids["waiting"].append(ids["child"][0])
    return out


@pytest.fixture
async def populated(valkey_server: ValkeyAddress) -> Populated:
    """A freshly populated queue under a prefix no other test uses."""
    return await populate(valkey_server.url, f"dash{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def client_for(
    valkey_server: ValkeyAddress,
) -> AsyncIterator[Any]:
    """`client_for(populated, **create_app options)`: an httpx client on a new dashboard."""
    from glidemq.dashboard import create_app

    apps: list[Any] = []
    clients: list[httpx.AsyncClient] = []

    async def make(p: Populated, **options: Any) -> httpx.AsyncClient:
        options.setdefault("names_ttl", 0)
        app = create_app(p.url, prefix=p.prefix, **options)
        apps.append(app)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
    for app in apps:
        await app.state.dashboard.close()


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token a page put in its forms."""
    found = _CSRF.search(html)
    assert found is not None, "the page has no action form"
    return found.group(1)


# -- the real console script -------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / ".venv" / "bin" / "glidemq-dashboard"


def dashboard_argv() -> list[str]:
    """How to run `glidemq-dashboard` here: the installed script, else the module."""
    if SCRIPT.exists():
        return [str(SCRIPT)]
    return [sys.executable, "-m", "glidemq.dashboard.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_dashboard(url: str, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`glidemq-dashboard --url URL --port P ARGS` running; yields its base URL and process."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")}
    proc = subprocess.Popen(
        [*dashboard_argv(), "--url", url, "--port", str(port), *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"glidemq-dashboard exited: {proc.communicate()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("glidemq-dashboard did not listen within 30 s") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
