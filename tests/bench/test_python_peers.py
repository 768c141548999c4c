"""The Python job queues of glidemq-bench (Celery, Dramatiq, arq, RQ, SAQ, Taskiq): one
driver with an adapter per library, each installed into a virtualenv of its own and run
through the real package against a real Valkey. No speed is asserted: a shared 2-core
machine makes any number meaningless here.

The per-library smoke tests install from the package index; all but Taskiq's carry the
`python_peers` marker, which the default run leaves out (`-m python_peers` runs them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from glidemq.bench.cli import _systems, build_parser
from glidemq.bench.harness import PROFILES, format_python_table, make_record, ratios
from glidemq.bench.peer import (
    PYTHON_QUEUES,
    PYTHON_QUEUES_DIR,
    PeerError,
    ScenarioParams,
    ensure_python_queue,
    parse_systems,
    run_system,
)

ROOT = Path(__file__).resolve().parents[2]


def _pinned_version(system: str) -> str:
    dist = {"taskiq": "taskiq"}.get(system, system)
    for line in (PYTHON_QUEUES_DIR / system / "requirements.txt").read_text().splitlines():
        if line.lower().startswith(f"{dist}=="):
            return line.split("==", 1)[1]
    raise AssertionError(f"{dist} is not pinned in {system}/requirements.txt")


def test_with_python_peers_adds_every_python_queue_and_the_default_leaves_them_out() -> None:
    parser = build_parser()
    assert _systems(parser.parse_args(["quick"])) == ("glidemq", "bullmq")
    flagged = _systems(parser.parse_args(["quick", "--with-python-peers"]))
    assert flagged == ("glidemq", "bullmq", "celery", "dramatiq", "arq", "rq", "saq", "taskiq")
    run = parser.parse_args(
        ["run", "--profile", "python", "--systems", "glidemq,taskiq", "--with-python-peers"]
    )
    # Named ones stay where they were named, and none twice.
    assert _systems(run) == ("glidemq", "taskiq", "celery", "dramatiq", "arq", "rq", "saq")
    assert parse_systems("glidemq,celery,rq") == ("glidemq", "celery", "rq")
    with pytest.raises(ValueError, match=r"unknown system\(s\) 'huey'"):
        parse_systems("glidemq,huey")
    scenarios = {(p.scenario, p.concurrency) for p in PROFILES["python"]}
    assert scenarios == {("add-bulk", 100), ("process", 1), ("process", 10), ("process", 100)}
    with pytest.raises(PeerError, match="unknown Python queue 'huey'"):
        ensure_python_queue("huey")


def test_every_python_queue_has_pinned_requirements_and_an_adapter() -> None:
    driver = (PYTHON_QUEUES_DIR / "driver.py").read_text()
    for system in PYTHON_QUEUES:
        lines = [
            line
            for line in (PYTHON_QUEUES_DIR / system / "requirements.txt").read_text().splitlines()
            if line and not line.startswith("#")
        ]
        assert lines and all("==" in line for line in lines), system
        assert _pinned_version(system)
        assert f'name, dist = "{system}"' in driver


def _rec(system: str, params: ScenarioParams, rep: int, **result: Any) -> dict[str, Any]:
    return make_record(system, params, rep, {"version": "1.0", **result})


def test_the_python_table_shows_each_queue_its_ratio_and_why_one_did_not_run() -> None:
    p1 = ScenarioParams("process", jobs=100, concurrency=1)
    p10 = ScenarioParams("process", jobs=100, concurrency=10)
    records = [
        _rec("glidemq", p1, 0, jobs=100, seconds=0.05),
        _rec("taskiq", p1, 0, jobs=100, seconds=0.04, note="c = max_async_tasks"),
        _rec("rq", p1, 0, jobs=100, seconds=0.5, note="c = 1: SimpleWorker"),
        _rec("glidemq", p10, 0, jobs=100, seconds=0.01),
        _rec("taskiq", p10, 0, jobs=100, seconds=0.05, note="c = max_async_tasks"),
        _rec("rq", p10, 0, jobs=0, unsupported="one job at a time", note="c = 1: SimpleWorker"),
    ]
    summary = ratios(records)
    taskiq = summary["process c=1"]["python_queues"]["taskiq"]
    assert taskiq["median_value"] == pytest.approx(2500)
    assert taskiq["median_ratio"] == pytest.approx(0.8)  # behind: shown as it is
    assert summary["process c=1"]["python_queues"]["rq"]["median_ratio"] == pytest.approx(10)
    table = format_python_table(summary)
    head, c1, c10, *rest = table.splitlines()
    assert head.split() == ["scenario", "glidemq", "rq", "taskiq"]
    assert "200 (10.0x)" in c1 and "2,500 (0.8x)" in c1
    assert "unsupported" in c10 and "2,000 (5.0x)" in c10
    assert any(
        line.startswith("rq 1.0:") and "process c=10 unsupported: one job at a time" in line
        for line in rest
    )
    assert any(line.startswith("taskiq 1.0: c = max_async_tasks") for line in rest)
    # Without Python queues there is no second table.
    assert format_python_table(ratios(records[:1])) == ""


@pytest.fixture(scope="module")
def installed(request: pytest.FixtureRequest) -> Any:
    """Installs a Python queue's virtualenv (pip, the first time on a machine) or skips."""

    def install(system: str) -> Path:
        try:
            return ensure_python_queue(system, quiet=True)
        except PeerError as exc:
            pytest.skip(f"the {system} peer could not be installed (no package index?): {exc}")

    return install


_SLOW_ONLY = pytest.mark.slow
_EXCLUDED = [pytest.mark.slow, pytest.mark.python_peers]


@pytest.mark.parametrize(
    "system",
    [
        pytest.param("taskiq", marks=_SLOW_ONLY),
        *(pytest.param(s, marks=_EXCLUDED) for s in PYTHON_QUEUES if s != "taskiq"),
    ],
)
def test_a_python_queue_adds_and_drains_a_small_workload(
    system: str, installed: Any, valkey_server: Any, queue_name: str
) -> None:
    installed(system)
    pid = getattr(valkey_server, "pid", None)
    version = _pinned_version(system)
    c = 1 if system == "rq" else 10  # an RQ worker runs one job at a time
    for params in (
        ScenarioParams("add-bulk", jobs=200, chunk=50),
        ScenarioParams("process", jobs=200, concurrency=c, chunk=50),
    ):
        valkey_server.cli("FLUSHALL")
        result = run_system(system, params, valkey_server.port, pid, queue_name, timeout=120)
        rec = make_record(system, params, 0, result)
        assert rec["jobs"] == 200 and rec["jobs_per_s"] > 0, rec
        assert rec["version"] == version and rec["client_us_per_job"] > 0
        assert "unsupported" not in rec
        if params.scenario == "process":
            assert rec["note"].startswith("c = ")  # what concurrency means here
    if system == "rq":
        many = run_system(system, ScenarioParams("process", jobs=200, concurrency=10),
                          valkey_server.port, pid, queue_name)  # fmt: skip
        assert many["jobs"] == 0 and "one job at a time" in many["unsupported"]
    # A scenario the driver lacks is recorded with its reason, not run.
    lat = run_system(system, ScenarioParams("latency"), valkey_server.port, pid, queue_name)
    assert lat["jobs"] == 0 and "not implemented" in lat["unsupported"]


@pytest.mark.slow
def test_run_with_a_python_queue_records_it_and_prints_the_python_table(
    installed: Any, tmp_path: Path
) -> None:
    installed("taskiq")
    cmd = [
        sys.executable, "-m", "glidemq.bench.cli", "run", "--profile", "python", "--reps", "1",
        "--scale", "0.02", "--systems", "glidemq,taskiq", "--only", "process", "--out",
        str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (records_file,) = tmp_path.glob("records-*.jsonl")
    records = [orjson.loads(line) for line in records_file.read_bytes().splitlines()]
    seen = {(r["system"], r["concurrency"]) for r in records}
    assert seen == {(s, c) for s in ("glidemq", "taskiq") for c in (1, 10, 100)}
    assert all(r["jobs"] == 100 and r["jobs_per_s"] > 0 for r in records)
    out = done.stdout.split("glidemq vs the Python queues\n", 1)[1].splitlines()
    assert out[0].split() == ["scenario", "glidemq", "taskiq"]
    assert [line.split()[:2] for line in out[1:4]] == [
        ["process", "c=1"], ["process", "c=10"], ["process", "c=100"]
    ]  # fmt: skip
    assert "max_async_tasks" in done.stdout
