"""The Flask extension against a real Valkey: the example app under a real gunicorn (sync
and gthread workers, and a preloaded master that connected before forking) enqueues tasks
that `glidemq-run examples.flask_app.tasks` completes; the extension's misuse is a clear
error. In-process calls run in a thread (`asyncio.to_thread`): this session's event loop
reads valkey-glide's replies and must keep running while a sync call waits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask", reason="flask is not installed (it is in the dev extra)")
from flask import Flask

from glidemq import GlideMQError, Queue
from glidemq.integrations.flask import GlideMQ
from glidemq.sync import Queue as SyncQueue
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[3]
GUNICORN = Path(sys.executable).with_name("gunicorn")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, form: dict[str, str] | None = None) -> tuple[int, Any]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


class Served:
    """gunicorn and glidemq-run serving the example app on a queue of its own."""

    def __init__(self, tmp: Path, url: str, queue: str, target: str, flags: list[str]):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")},
            "GLIDEMQ_URL": url,
            "FLASK_EXAMPLE_QUEUE": queue,
            "PYTHONPATH": str(ROOT),
        }
        self.gunicorn = subprocess.Popen(
            [
                *(str(GUNICORN), "-w", "2", *flags, "-b", f"127.0.0.1:{self.port}"),
                *("--control-socket", str(tmp / "gunicorn.ctl"), target),
            ],
            cwd=ROOT,
            env=env,
            stdout=(tmp / "gunicorn.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "glidemq.runtime.cli", "examples.flask_app.tasks"),
                *("--procs", "1", "--concurrency", "8"),
            ],
            cwd=ROOT,
            env=env,
            stdout=(tmp / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.tmp = tmp

    def logs(self) -> str:
        return "".join((self.tmp / n).read_text(errors="replace") for n in ("gunicorn.log",))

    def stop(self) -> tuple[int | None, int | None]:
        for proc in (self.gunicorn, self.worker):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in (self.gunicorn, self.worker):
            try:
                codes.append(proc.wait(timeout=20))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(None)
        return codes[0], codes[1]


@pytest.fixture
def served(tmp_path: Path, valkey_server: Any, queue_name: str) -> Iterator[Any]:
    if not GUNICORN.exists():
        pytest.skip(f"gunicorn is not installed at {GUNICORN} (it is in the dev extra)")
    running: list[Served] = []

    def start(target: str, flags: list[str]) -> Served:
        s = Served(tmp_path, valkey_server.url, queue_name, target, flags)
        running.append(s)
        return s

    yield start
    for s in running:
        s.stop()
        print(s.logs()[-5000:])


@pytest.mark.parametrize(
    ("target", "flags"),
    [
        ("examples.flask_app.app:app", ["-k", "sync"]),
        ("examples.flask_app.app:app", ["-k", "gthread", "--threads", "4"]),
        ("tests.fixtures.flask_preload:app", ["-k", "gthread", "--threads", "4", "--preload"]),
    ],
    ids=["sync", "gthread", "gthread-preload"],
)
async def test_example_app_under_gunicorn_enqueues_and_a_worker_completes(
    served: Any, valkey_server: Any, queue_name: str, target: str, flags: list[str]
) -> None:
    s = served(target, flags)

    async def up() -> bool:
        try:
            status, _ = await asyncio.to_thread(http, "GET", f"{s.base}/stats")
        except OSError:
            return False
        return status == 200

    await wait_for(up, timeout=30, interval=0.2)

    async def post(i: int) -> Any:
        form = {"email": f"user{i}@example.com", "name": f"u{i}"}
        return await asyncio.to_thread(http, "POST", f"{s.base}/signups", form)

    replies = await asyncio.gather(*(post(i) for i in range(24)))
    assert all(status == 202 for status, _ in replies), replies
    ids = [body["id"] for _, body in replies]
    assert len(set(ids)) == 24
    gunicorn_pids = {body["served_by"] for _, body in replies}
    assert gunicorn_pids and s.gunicorn.pid not in gunicorn_pids  # workers served, not master

    async def all_sent() -> bool:
        for job_id in ids:
            _, body = await asyncio.to_thread(http, "GET", f"{s.base}/signups/{job_id}")
            if body["state"] != "completed":
                return False
        return True

    await wait_for(all_sent, timeout=30, interval=0.2)
    _, body = await asyncio.to_thread(http, "GET", f"{s.base}/signups/{ids[3]}")
    assert body["result"]["sent_to"].endswith("@example.com")
    status, _ = await asyncio.to_thread(http, "POST", f"{s.base}/signups", {})
    assert status == 400
    status, _ = await asyncio.to_thread(http, "GET", f"{s.base}/signups/nope")
    assert status == 404
    # one connection per queue and process, not one per request
    clients = valkey_server.cli("CLIENT", "LIST").splitlines()
    mine = [line for line in clients if f"name=glidemq-queue-{queue_name} " in line + " "]
    assert 0 < len(mine) <= 8, mine
    gunicorn_code, worker_code = s.stop()
    assert gunicorn_code == 0 and worker_code == 0, s.logs()
    queue: Queue[Any, Any] = Queue(queue_name, connection=valkey_server.url)
    try:
        assert (await queue.get_job_counts()).completed == 24
    finally:
        await queue.obliterate(force=True)
        await queue.close()


def test_the_extension_reads_config_and_refuses_misuse(valkey_server: Any) -> None:
    app = Flask("t")
    app.config["GLIDEMQ_URL"] = valkey_server.url
    app.config["GLIDEMQ_PREFIX"] = "flaskt"
    app.config["GLIDEMQ_TIMEOUT"] = 5
    ext = GlideMQ(app)
    q = ext.queue("flask-config")
    assert isinstance(q, SyncQueue) and q is ext.queue("flask-config")  # opened once
    assert q.timeout == 5.0 and q.connection.url.startswith("valkey://")
    late = GlideMQ()
    with pytest.raises(GlideMQError, match="app context"):
        late.queue("x")
    other = Flask("other")
    with other.app_context(), pytest.raises(GlideMQError, match="init_app"):
        late.queue("x")
    late.init_app(other)
    with other.app_context():
        assert late.queue("x").name == "x"  # the current app's queue
    ext.close()
    with other.app_context():
        late.close()


async def test_in_process_add_through_the_extension(valkey_server: Any, queue_name: str) -> None:
    app = Flask("inproc")
    app.config["GLIDEMQ_URL"] = valkey_server.url
    ext = GlideMQ(app)

    def add() -> str:
        with app.test_request_context("/"):
            job = ext.queue(queue_name).add("hello", {"n": 1})
            assert job is not None
            return job.id

    job_id = await asyncio.to_thread(add)
    queue: Queue[Any, Any] = Queue(queue_name, connection=valkey_server.url)
    try:
        stored = await queue.get_job(job_id)
        assert stored is not None and stored.data == {"n": 1}
    finally:
        await queue.obliterate(force=True)
        await queue.close()
        await asyncio.to_thread(ext.close)
