"""A worker process that writes to its pipe as fast as it can does not starve the
supervisor: the other processes' reports are read, and SIGTERM is acted on. The supervisor
is the real one, forking real processes (stand-ins for workers, tests/fixtures/
chatty_supervisor.py); it reads at most READ_PER_TURN bytes of one pipe per turn."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_a_chatty_child_starves_neither_the_others_nor_the_signals() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.chatty_supervisor", "3"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while sum("ready on quiet" in line for line in lines) < 2:
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "the quiet workers' reports were never read"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        # grace 2 s, then SIGKILL 3 s later: well inside this bound unless the loop is stuck
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    text = "".join(lines)
    assert "ready on chatty" in text
    assert "Traceback" not in text


def test_one_turn_reads_at_most_read_per_turn_of_one_pipe() -> None:
    # A pipe of 1 MiB filled with heartbeats: one turn takes a bounded part and leaves the
    # rest for the next turns (before, it read until the pipe was empty, however long the
    # child kept it full).
    import fcntl
    import select

    from glidemq.client.connection import ConnectionOptions
    from glidemq.process.frames import encode_frame
    from glidemq.runtime import ipc
    from glidemq.runtime.config import RuntimeConfig
    from glidemq.runtime.supervisor import READ_PER_TURN, ForkedProcess, Supervisor

    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        beat = {"type": ipc.HEARTBEAT, "completed": 7, "failed": 0, "active": 0, "rss": 0}
        frame = encode_frame([beat], ipc.MAX_FRAME)
        written = 0
        while True:
            try:
                written += os.write(w, frame)
            except BlockingIOError:
                break
        assert written > 2 * READ_PER_TURN
        sup = Supervisor(RuntimeConfig(target="none:none", procs=1), ConnectionOptions())
        child = ForkedProcess(0, os.getpid(), r, 0, time.monotonic())
        sup._read_child(child)
        assert child.stats.get("completed") == 7  # what it read, it handled
        assert select.select([r], [], [], 0)[0], "one turn emptied the whole pipe"
        left = 0
        while True:
            try:
                left += len(os.read(r, 1 << 16))
            except BlockingIOError:
                break
        assert written - left <= READ_PER_TURN
    finally:
        os.close(w)
        with contextlib.suppress(OSError):
            os.close(r)
