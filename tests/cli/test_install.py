"""`pip install <checkout>` into a fresh virtualenv gives a light core that runs a task end
to end: the package imports (with `glidemq.sync`), none of the extras came along, fewer than
30 packages are installed, and `glidemq-run` of that venv runs a task a sync caller awaits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_PACKAGES = 30
EXTRAS = (
    "flask", "django", "fastapi", "starlette", "pyspark", "locust", "mypy", "testcontainers",
    "mkdocs",
)  # fmt: skip
NETWORK_WORDS = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
)

TASKS = """
import os

import glidemq


@glidemq.task(os.environ["CHECK_QUEUE"], attempts=2)
def greet(name: str, times: int = 1) -> str:
    return " ".join([f"hello {name}"] * times)
"""

CALLER = """
import glidemq, glidemq.sync, tasks_mod
print(tasks_mod.greet.sync.add_and_wait("zoë", times=2))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    pip = subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "-q", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if pip.returncode != 0:
        if any(word in pip.stdout + pip.stderr for word in NETWORK_WORDS):
            pytest.skip(f"no package index reachable from here: {pip.stderr.strip()[-300:]}")
        raise AssertionError(f"pip install of the checkout failed:\n{pip.stdout}\n{pip.stderr}")
    return where


def _python(venv: Path, code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{code}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_a_plain_install_is_a_light_core(venv: Path, tmp_path: Path) -> None:
    listed = _python(
        venv,
        "import importlib.metadata as m; print('\\n'.join(sorted(d.metadata['Name'] "
        "for d in m.distributions())))",
        tmp_path,
    ).split()
    assert "glidemq" in listed and "valkey-glide" in listed
    assert len(listed) < MAX_PACKAGES, f"{len(listed)} packages: {listed}"
    found = _python(
        venv,
        "import importlib.util as u, glidemq, glidemq.sync, glidemq.testing; "
        f"print([n for n in {list(EXTRAS)!r} if u.find_spec(n)])",
        tmp_path,
    )
    assert found.strip() == "[]", f"extras installed by a plain install: {found}"


@pytest.mark.slow
def test_the_installed_glidemq_run_runs_a_task(
    venv: Path, tmp_path: Path, valkey_server: Any, queue_name: str
) -> None:
    (tmp_path / "tasks_mod.py").write_text(textwrap.dedent(TASKS))
    env = {"GLIDEMQ_URL": valkey_server.url, "PYTHONPATH": str(tmp_path), "CHECK_QUEUE": queue_name}
    run = subprocess.Popen(
        [str(venv / "bin" / "glidemq-run"), "tasks_mod", "--procs", "1"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out = _python(venv, textwrap.dedent(CALLER), tmp_path, env)
        assert out.strip() == "hello zoë hello zoë"
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        try:
            logs, _ = run.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            logs, _ = run.communicate()
    assert run.returncode == 0, logs.decode(errors="replace")
