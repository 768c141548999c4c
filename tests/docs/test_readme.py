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

import pytest

from glidemq.server.valkey import free_port

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = FENCE.findall(README)
SERVER = ROOT / ".venv" / "bin" / "glidemq-server"


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
