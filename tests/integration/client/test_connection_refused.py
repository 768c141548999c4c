"""A refused connection is reported as refused, at once, as a typed error."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

import glidemq
from glidemq import Queue, Worker


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _noop(job: Any) -> None:
    return None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
async def test_refused_connection_says_connection_refused_at_once(
    cluster: bool, queue_name: str
) -> None:
    port = _closed_port()
    url = f"valkey://127.0.0.1:{port}" + ("?cluster=1" if cluster else "")
    queue: Queue[Any, Any] = Queue(queue_name, connection=url)
    started = time.monotonic()
    with pytest.raises(glidemq.ConnectionError) as info:
        await queue.add("x", 1)
    elapsed = time.monotonic() - started
    await queue.close()
    message = str(info.value)
    assert "connection refused" in message.lower(), message
    assert "timed out" not in message
    assert message == message.strip()
    assert f"127.0.0.1:{port}" in message
    assert elapsed < 1.5, f"took {elapsed:.1f} s to report a refused connection"

    worker: Worker[Any, Any] = Worker(queue_name, _noop, connection=url)
    with pytest.raises(glidemq.ConnectionError, match=r"(?i)connection refused"):
        await worker.start()
    await worker.close()


def test_a_refused_connection_says_what_to_do_in_a_short_traceback(tmp_path: Any) -> None:
    """A script whose `.delay` finds no server: the error says to start glidemq-server or
    check GLIDEMQ_URL, and the traceback is the script's and the sync API's frames only."""
    import subprocess
    import sys

    script = tmp_path / "producer.py"
    script.write_text(
        "import glidemq\n\n"
        "@glidemq.task('emails')\n"
        "def send(to: str) -> str:\n"
        "    return to\n\n"
        "send.delay('ada@example.com')\n"
    )
    port = _closed_port()
    done = subprocess.run(
        [sys.executable, str(script)],
        env={"GLIDEMQ_URL": f"valkey://127.0.0.1:{port}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    err = done.stderr
    last = err.strip().splitlines()[-1]
    assert last.startswith("glidemq.errors.ConnectionError: cannot connect to"), err
    assert "Start one with glidemq-server, or point GLIDEMQ_URL" in last, err
    assert err.count("Traceback") == 1 and len(err.splitlines()) <= 15, err
    assert "/glidemq/client/" not in err and "/glidemq/queue/" not in err, err


def test_a_url_without_a_scheme_suggests_the_valkey_one() -> None:
    with pytest.raises(glidemq.ValidationError) as bad:
        glidemq.ConnectionOptions.from_url("127.0.0.1:6411")
    assert (
        str(bad.value)
        == "url: '127.0.0.1:6411' has no scheme: write it as 'valkey://127.0.0.1:6411'"
    )
