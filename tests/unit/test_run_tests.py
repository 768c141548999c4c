"""tools/run_tests.py: the default split leaves no test directory out, paths are spread over
concurrent pytest processes, and the run fails when any process fails or collects nothing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tools" / "run_tests.py"
# Temporary test directories are outside the project: no project conftest, no plugins
# (PYTEST_DISABLE_PLUGIN_AUTOLOAD keeps each pytest start-up short).
PLAIN = ["-q", "-p", "no:cacheprovider"]


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_tests", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _run(*args: str | Path, jobs: int = 2) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GLIDEMQ_TEST_JOBS": str(jobs), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, str(RUNNER), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _suite(tmp_path: Path) -> dict[str, Path]:
    dirs = {}
    for name, body in {
        "good": "def test_one():\n    assert True\n\ndef test_two():\n    assert True\n",
        "also_good": "def test_three():\n    assert 1 + 1 == 2\n",
        "bad": "def test_broken():\n    assert 1 == 2\n",
        "empty": "",
    }.items():
        d = tmp_path / name
        d.mkdir()
        if body:
            (d / f"test_{name}.py").write_text(body)
        dirs[name] = d
    return dirs


def test_default_shards_cover_every_test_directory_once() -> None:
    shards = _runner().SHARDS
    listed = [d for dirs in shards.values() for d in dirs]
    assert len(listed) == len(set(listed)), "a directory is in two shards"
    with_tests = {
        str(p.parent.relative_to(ROOT))
        for p in (ROOT / "tests").glob("*/test_*.py")
        if p.parent.name != "fixtures"
    }
    assert with_tests - set(listed) == set(), "test directories no shard runs"
    assert all((ROOT / d).is_dir() for d in listed)


def test_paths_and_options_are_told_apart() -> None:
    runner = _runner()
    paths, options = runner.split_args(
        ["tests/unit", "-k", "tests/docs", "tests/docs::test_x", "-x", "--durations", "5"]
    )
    assert paths == ["tests/unit", "tests/docs::test_x"]
    assert options == ["-k", "tests/docs", "-x", "--durations", "5"]


def test_paths_are_spread_over_the_processes_heaviest_first() -> None:
    runner = _runner()
    shards, options = runner.plan(["tests/unit", "tests/chaos", "tests/docs", "-x"], 2)
    assert options == ["-x"]
    assert [s.paths for s in shards] == [["tests/chaos"], ["tests/unit", "tests/docs"]]
    (one,) = runner.plan(["tests/unit", "tests/docs"], 1)[0]
    assert one.paths == ["tests/unit", "tests/docs"]
    default, _ = runner.plan([], 2)
    assert [s.name for s in default] == list(runner.SHARDS)


def test_two_passing_processes_pass_with_their_output_prefixed(tmp_path: Path) -> None:
    d = _suite(tmp_path)
    done = _run(d["good"], d["also_good"], *PLAIN)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[p1] 2 passed" in done.stdout and "[p2] 1 passed" in done.stdout
    assert "[p1] passed in" in done.stdout and "[p2] passed in" in done.stdout


def test_a_failure_in_one_process_fails_the_run(tmp_path: Path) -> None:
    d = _suite(tmp_path)
    done = _run(d["good"], d["bad"], *PLAIN)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED (exit 1)" in done.stdout and "test_broken" in done.stdout
    # the failing test is named again after the summary, so a log's tail still shows it
    tail = done.stdout.split("run_tests: summary", 1)[1]
    assert "test_bad.py::test_broken" in tail, done.stdout


def test_a_process_that_collects_nothing_fails_the_run(tmp_path: Path) -> None:
    d = _suite(tmp_path)
    done = _run(d["good"], d["empty"], *PLAIN)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "collected no tests" in done.stderr and str(d["empty"]) in done.stderr
    alone = _run(d["empty"], *PLAIN, jobs=1)
    assert alone.returncode == 1 and "collected no tests" in alone.stderr


def test_a_filter_may_leave_one_process_empty_but_not_all(tmp_path: Path) -> None:
    d = _suite(tmp_path)
    some = _run(d["good"], d["also_good"], "-k", "test_one", *PLAIN)
    assert some.returncode == 0, some.stdout + some.stderr
    none = _run(d["good"], d["also_good"], "-k", "no_such_test", *PLAIN)
    assert none.returncode == 1 and "collected no tests" in none.stderr
