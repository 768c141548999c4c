"""The wheel holds the package and its data, never development files: no Locust file, no
tests, no peers' node_modules or virtualenvs (which appear in a checkout once the
benchmark peers are installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from glidemq.bench.loadtest import LOCUSTFILE, locust_missing
from glidemq.client.functions import LIBRARY_FILES

ROOT = Path(__file__).resolve().parents[2]

# What a checkout holds after the benchmark peers were installed in it.
PLANTED = (
    "glidemq/bench/peers/bullmq/node_modules/__init__.py",
    "glidemq/bench/peers/bullmq/node_modules/node-gyp/gyp/pylib/gyp/__init__.py",
    "glidemq/bench/peers/bullmq_py/.venv/lib/python3.11/site-packages/bullmq/__init__.py",
    "glidemq/bench/peers/python_queues/taskiq/.venv/lib/python3.11/site-packages/t/__init__.py",
)


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files to build from are unknown")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    return [p for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


@pytest.mark.slow  # builds a wheel in an isolated build environment: ~15-45 s
def test_wheel_has_no_development_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel in _tracked_files():  # a clean copy: no stale build/ of an earlier build
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    for rel in PLANTED:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 and "No matching distribution found for setuptools" in done.stderr:
        pytest.skip(f"no package index for the build backend: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = tmp_path.glob("glidemq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    dev = [
        n
        for n in names
        if "locust" in n
        or "node_modules" in n
        or "/.venv/" in n
        or n.startswith(("tests/", "benchmarks/", "tools/"))
    ]
    assert dev == [], dev
    # ... and still everything the package needs at run time
    for needed in (
        "glidemq/__init__.py",
        "glidemq/py.typed",
        "glidemq/bench/peers/bullmq/package-lock.json",
        "glidemq/bench/peers/bullmq_py/peer.py",
        "glidemq/bench/baselines/ci.json",
        "glidemq/dashboard/templates/base.html",
    ):
        assert needed in names, needed
    # every source file of the function library (they are joined when it is loaded)
    for lua in LIBRARY_FILES:
        assert f"glidemq/lua/{lua}" in names, lua


def test_locust_file_is_found_in_the_checkout() -> None:
    assert LOCUSTFILE == ROOT / "benchmarks" / "locustfile.py"
    assert LOCUSTFILE.is_file()
    assert locust_missing() is None


def test_locust_command_says_what_is_missing_outside_a_checkout(tmp_path: Path) -> None:
    why = locust_missing(tmp_path / "benchmarks" / "locustfile.py")
    assert why is not None
    assert "source checkout" in why and str(tmp_path) in why
