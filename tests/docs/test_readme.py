"""The README's first screen works for a newcomer: the two set-up commands come first, the
server command it names starts a server, and the first example, run as written against it,
prints its result. TESTING.md names every marker pyproject declares."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from glidemq.server.valkey import free_port

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = FENCE.findall(README)
SERVER = ROOT / ".venv" / "bin" / "glidemq-server"
RUN = ROOT / ".venv" / "bin" / "glidemq-run"


def test_the_two_setup_commands_come_first() -> None:
    kind, body = BLOCKS[0]
    assert kind == "bash"
    assert [line.split()[:2] for line in body.splitlines()] == [["make", "run"], ["make", "test"]]


def test_the_first_example_is_the_file_it_tells_you_to_run() -> None:
    commands = [body for kind, body in BLOCKS if kind == "bash"]
    assert commands[1].split()[0] == ".venv/bin/glidemq-server"
    assert commands[2].strip() == ".venv/bin/python examples/first_job.py"
    first_python = next(body for kind, body in BLOCKS if kind == "python")
    assert first_python == (ROOT / "examples" / "first_job.py").read_text()


def test_the_first_example_prints_its_result_on_the_server_the_readme_starts(
    tmp_path: Path,
) -> None:
    if not SERVER.exists():
        pytest.skip(f"no installed console script at {SERVER}")
    port = free_port()  # the README's server runs on 6379; the test must not take that port
    out = tmp_path / "server.out"
    with open(out, "wb") as sink:
        server = subprocess.Popen(
            [str(SERVER), "--port", str(port)], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while "URL: " not in out.read_text():
            assert server.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        url = f"valkey://127.0.0.1:{port}"
        assert f"URL: {url}" in out.read_text()
        done = subprocess.run(
            [sys.executable, "examples/first_job.py"],
            cwd=ROOT,
            env={"GLIDEMQ_URL": url, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(r"job \d+ completed: sent to ada@example\.com\n", done.stdout)
        assert "It prints `job 1 completed: sent to ada@example.com`" in README
        server.send_signal(signal.SIGINT)
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)


def test_testing_md_names_every_declared_marker() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = [m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]]
    testing = (ROOT / "docs" / "TESTING.md").read_text()
    assert markers
    for marker in markers:
        assert f"| `{marker}` |" in testing, f"docs/TESTING.md does not list the {marker} marker"


def _block_after(marker: str, kind: str) -> str:
    """The first `kind` block of the README that comes after the text `marker`."""
    start = README.index(marker)
    for match in FENCE.finditer(README, start):
        if match.group(1) == kind:
            return match.group(2)
    raise AssertionError(f"no {kind} block after {marker!r}")


def test_the_sync_tasks_snippet_runs_as_two_files_the_way_the_readme_says(
    valkey_server: Any, tmp_path: Path
) -> None:
    """The task module and the producer, saved under the names the README gives, with the
    worker started by the README's command in that directory: the producer prints what the
    README says, and no job is left failed or waiting."""
    if not RUN.exists():
        pytest.skip(f"no installed console script at {RUN}")
    valkey_server.cli("FLUSHALL")
    section = "## Tasks from sync code"
    module = _block_after(section, "python")
    producer = _block_after("Save this as\n`producer.py`", "python")
    assert module.startswith("# app/tasks.py\n") and producer.startswith("# producer.py\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "tasks.py").write_text(module)
    (tmp_path / "producer.py").write_text(producer)
    worker_command = _block_after(section, "bash").split()
    producer_command = _block_after("# producer.py", "bash").split()
    assert worker_command == [".venv/bin/glidemq-run", "app.tasks"]
    assert producer_command == [".venv/bin/python", "producer.py"]
    env = {"GLIDEMQ_URL": valkey_server.url, "PATH": "/usr/bin:/bin"}
    out = tmp_path / "worker.out"
    with open(out, "wb") as sink:
        worker = subprocess.Popen(
            [str(ROOT / worker_command[0]), *worker_command[1:]],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        done = subprocess.run(
            [str(ROOT / producer_command[0]), *producer_command[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{done.stderr}\n{out.read_text()}"
        said = re.search(r"# (Hello .*)$", producer, re.MULTILINE)
        assert said is not None and done.stdout == said.group(1) + "\n"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, out.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    counts = {
        state: int(valkey_server.cli("ZCARD", f"glide:{{emails}}:{state}"))
        for state in ("failed", "scheduled")
    }
    assert counts == {"failed": 0, "scheduled": 0}, counts
    assert int(valkey_server.cli("ZCARD", "glide:{emails}:completed")) == 1
