"""The metrics an autoscaler reads (docs/DEPLOY.md), from the real processes on a real Valkey:
`glidemq-run --metrics-port` while one slow worker drains a backlog of 300 jobs, and
`glidemq exporter`, which answers with no worker running at all (what scale to zero needs)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from glidemq import JobOptions, Queue
from glidemq.server import EmbeddedValkey
from tests.helpers import wait_for

from .conftest import APP, CLIProcess, Launcher, cli_env, free_port

EXPORTER = [sys.executable, "-m", "glidemq.admin.cli", "exporter"]


def _get(url: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def _value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample (labels in the order the renderer writes them), or None."""
    inner = ",".join(f'{k}="{re.escape(v)}"' for k, v in labels.items())
    pattern = rf"^{name}{{{inner}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    m = re.search(pattern, text, re.M)
    return None if m is None else float(m.group(1))


def _exporter(tmp_path: Path, *args: str | int) -> CLIProcess:
    return CLIProcess([*EXPORTER, *(str(a) for a in args)], cli_env(), tmp_path / "exporter")


async def test_the_backlog_follows_one_slow_worker_draining_300_jobs(
    run_cli: Launcher, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    q = cli_queue.name
    before = int(time.time() * 1000)
    await cli_queue.add_bulk([("job", {"sleep": 0.03}, None) for _ in range(300)])
    after = int(time.time() * 1000)
    port = free_port()
    cli = run_cli(
        f"{APP}:record",
        *("--queue", q, "--url", valkey_server.url, "--procs", 1, "--concurrency", 1),
        *("--hold-window", 0, "--metrics-port", port),
    )
    await cli.wait_workers(1)
    readings: dict[float, tuple[float, float, float]] = {}  # read time -> backlog, active, age

    async def drained() -> bool:
        status, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        at = _value(text, "glidemq_queue_read_timestamp_seconds", queue=q)
        if at is None:
            return False
        backlog = _value(text, "glidemq_queue_backlog", queue=q)
        active = _value(text, "glidemq_queue_active", queue=q)
        age = _value(text, "glidemq_queue_oldest_waiting_seconds", queue=q)
        assert backlog is not None and active is not None and age is not None, text
        parts = [
            _value(text, "glidemq_queue_backlog_jobs", queue=q, kind=k)
            for k in ("waiting", "prioritized", "due", "grouped")
        ]
        assert parts[1:] == [0, 0, 0] and parts[0] == backlog, text
        readings[at] = (backlog, active, age)
        return backlog == 0 and active == 0

    await wait_for(drained, timeout=90, interval=0.25)
    ordered = [readings[t] for t in sorted(readings)]
    backlogs = [b for b, _, _ in ordered]
    assert backlogs == sorted(backlogs, reverse=True), ordered  # only ever goes down
    during = [(t, r) for t, r in sorted(readings.items()) if 0 < r[0] < 300]
    assert during, f"no reading while the backlog drained: {ordered}"
    for t, (_backlog, active, age) in during:
        assert active == 1  # one worker, one job at a time
        # every job waiting was added in [before, after]: its age is counted from then
        ready_at = t * 1000 - age * 1000
        assert before - 2 <= ready_at <= after + 2, (t, age, before, after)
    assert ordered[-1] == (0, 0, 0.0)
    assert (await cli_queue.get_job_counts()).completed == 300
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(20) == 0


async def test_the_exporter_answers_with_no_worker_running(
    tmp_path: Path, cli_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    q = cli_queue.name
    await cli_queue.add_bulk([("j", i, None) for i in range(20)])
    await cli_queue.add_bulk([("p", i, {"priority": 3}) for i in range(3)])
    await cli_queue.add_bulk([("soon", i, {"delay": 200}) for i in range(2)])
    await cli_queue.add("later", None, {"delay": 3_600_000})
    fair = JobOptions(group_key="tenant", group_weight=1)
    await cli_queue.add_bulk([("g", i, fair) for i in range(4)])  # 1 in the stream, 3 parked
    port = free_port()
    proc = _exporter(tmp_path, "--url", valkey_server.url, "--queue", q, "--port", port,
                     "--min-interval", 0)  # fmt: skip
    try:
        await proc.wait_log(r"glidemq exporter: http://127\.0\.0\.1:\d+/metrics for ")
        base = f"http://127.0.0.1:{port}"
        assert await asyncio.to_thread(_get, f"{base}/health") == (200, "ok\n")

        async def due_counted() -> str | None:
            status, text = await asyncio.to_thread(_get, f"{base}/metrics")
            assert status == 200
            due = _value(text, "glidemq_queue_backlog_jobs", queue=q, kind="due")
            return text if due == 2 else None

        text = await wait_for(due_counted, timeout=15, interval=0.1)
        assert _value(text, "glidemq_exporter_up") == 1
        assert _value(text, "glidemq_queue_backlog", queue=q) == 21 + 3 + 2 + 3
        expected = {"waiting": 21, "prioritized": 3, "due": 2, "grouped": 3}
        for kind, n in expected.items():
            assert _value(text, "glidemq_queue_backlog_jobs", queue=q, kind=kind) == n
        assert _value(text, "glidemq_queue_active", queue=q) == 0
        assert (_value(text, "glidemq_queue_oldest_waiting_seconds", queue=q) or 0) > 0
        assert _value(text, "glidemq_queue_paused", queue=q) == 0
        # the counts of glidemq-run's /metrics too: the due jobs are still "delayed" there
        assert _value(text, "glidemq_queue_jobs", queue=q, state="delayed") == 3
        assert "# TYPE glidemq_queue_backlog gauge" in text
        status, body = await asyncio.to_thread(_get, f"{base}/metrics", "HEAD")
        assert (status, body) == (200, "")
        assert (await asyncio.to_thread(_get, f"{base}/nope"))[0] == 404
        assert (await asyncio.to_thread(_get, f"{base}/metrics", "POST"))[0] == 405
        await cli_queue.pause()
        status, text = await asyncio.to_thread(_get, f"{base}/metrics")
        assert _value(text, "glidemq_queue_paused", queue=q) == 1
    finally:
        if proc.popen.poll() is None:
            proc.send(signal.SIGTERM)
        code = await proc.wait_exit(10)
        proc.cleanup()
    assert code == 0


async def test_without_queues_it_exports_every_queue(
    tmp_path: Path, valkey_server: Any, queue_name: str
) -> None:
    names = [f"{queue_name}-a", f"{queue_name}-b"]
    for i, name in enumerate(names):
        async with Queue(name, connection=valkey_server.url) as queue:
            await queue.add_bulk([("j", n, None) for n in range(i + 1)])
    port = free_port()
    proc = _exporter(tmp_path, "--url", valkey_server.url, "--port", port)
    try:
        await proc.wait_log("for every queue")
        _, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert [_value(text, "glidemq_queue_backlog", queue=n) for n in names] == [1, 2]
    finally:
        proc.cleanup()
        for name in names:
            async with Queue(name, connection=valkey_server.url) as queue:
                await queue.obliterate(force=True)


async def test_a_server_that_cannot_be_read_is_down_not_an_empty_queue(tmp_path: Path) -> None:
    dead = free_port()  # nothing listens there
    port = free_port()
    proc = _exporter(tmp_path, "--url", f"valkey://127.0.0.1:{dead}", "--queue", "q",
                     "--port", port)  # fmt: skip
    try:
        await proc.wait_log("glidemq exporter: ")
        status, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/health")
        assert status == 503 and body.strip()
        status, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert _value(text, "glidemq_exporter_up") == 0
        assert (_value(text, "glidemq_exporter_read_failures_total") or 0) >= 1
        assert "glidemq_queue_backlog{" not in text and "glidemq_queue_jobs{" not in text
        with EmbeddedValkey(port=dead):  # the server comes (back): the exporter is up again

            async def up() -> bool:
                status, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/health")
                return status == 200

            await wait_for(up, timeout=30, interval=0.2)
            _, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
            assert _value(text, "glidemq_exporter_up") == 1
            assert _value(text, "glidemq_queue_backlog", queue="q") == 0
    finally:
        proc.cleanup()


async def test_bad_input_is_a_usage_error(tmp_path: Path, valkey_server: Any) -> None:
    for n, args in enumerate((["--queue", "a{b}"], ["--port", "0"], ["--min-interval", "-1"])):
        proc = CLIProcess(
            [*EXPORTER, "--url", valkey_server.url, *args], cli_env(), tmp_path / f"bad{n}"
        )
        assert await proc.wait_exit(30) == 2, proc.stderr()
        assert "error" in proc.stderr()
        proc.cleanup()
