"""BullMQ for Python (`bullmq-py`), the optional third system of glidemq-bench: installed
into a virtualenv of its own, run through the real package against a real Valkey, and shown
beside glidemq and BullMQ. No speed is asserted: a shared 2-core machine makes any number
meaningless here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from glidemq.bench.harness import format_table, make_record, ratios, run_profile
from glidemq.bench.peer import (
    PEER_PY_DIR,
    PeerError,
    ScenarioParams,
    ensure_bullmq_py,
    parse_systems,
    run_system,
)

ROOT = Path(__file__).resolve().parents[2]
JOB_FIELDS = {"queue", "job_id", "enqueued_ms", "started_ms", "finished_ms", "pid"}


@pytest.fixture(scope="session")
def bullmq_py() -> Path:
    """The peer's python, installed once per session (pip, the first time on a machine)."""
    try:
        return ensure_bullmq_py(quiet=True)
    except PeerError as exc:
        pytest.skip(f"the BullMQ for Python peer could not be installed (no package index?): {exc}")


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "glidemq.bench.cli", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_quick_with_bullmq_py_records_every_system_and_prints_its_ratio(
    bullmq_py: Path, tmp_path: Path
) -> None:
    systems = ["glidemq", "bullmq", "bullmq-py"]
    args = ["--with-bullmq-py"]
    if shutil.which("node") is None or shutil.which("npm") is None:
        systems, args = ["glidemq", "bullmq-py"], ["--systems", "glidemq,bullmq-py"]
    done = _bench("quick", "--reps", "1", "--scale", "0.02", "--out", str(tmp_path), *args)
    assert done.returncode == 0, done.stderr
    (records_file,) = tmp_path.glob("records-*.jsonl")
    records = [orjson.loads(line) for line in records_file.read_bytes().splitlines()]
    seen = {(r["system"], r["scenario"]) for r in records}
    scenarios = {"add-bulk", "add-concurrent", "process", "latency"}
    assert seen == {(s, sc) for s in systems for sc in scenarios}
    for rec in records:
        assert rec["jobs"] > 0 and rec["jobs_per_s"] > 0, rec
        assert rec["client_us_per_job"] > 0 and "unsupported" not in rec
    py = {r["scenario"]: r for r in records if r["system"] == "bullmq-py"}
    assert py["process"]["jobs"] == 400 and py["add-bulk"]["jobs"] == 400
    assert py["latency"]["jobs"] == 1000 and py["latency"]["p99_ms"] > 0
    assert py["process"]["version"] == "3.4.4"
    header, *rows = done.stdout.splitlines()
    assert "BullMQ-py" in header and "ratio py" in header
    assert any(line.startswith("process c=100") for line in rows)
    assert "ratio py = glidemq / BullMQ for Python" in done.stdout


def test_default_runs_leave_bullmq_py_out_and_unknown_systems_are_rejected() -> None:
    assert parse_systems("glidemq,bullmq,bullmq-py") == ("glidemq", "bullmq", "bullmq-py")
    with pytest.raises(ValueError, match=r"unknown system\(s\) 'huey'"):
        parse_systems("glidemq,huey")
    with pytest.raises(ValueError, match="must include glidemq"):
        parse_systems("bullmq,bullmq-py")
    with pytest.raises(ValueError, match="named twice"):
        parse_systems("glidemq,bullmq,glidemq")
    bad = _bench("run", "--profile", "quick", "--systems", "glidemq,bullmq-node")
    assert bad.returncode == 2 and "unknown system(s) 'bullmq-node'" in bad.stderr
    assert "known: glidemq, bullmq, bullmq-py, celery," in bad.stderr
    # Without the new flags the table keeps its two systems.
    recs = [
        make_record(system, ScenarioParams("process", jobs=100), 0, {"jobs": 100, "seconds": s})
        for system, s in (("glidemq", 0.5), ("bullmq", 1.0))
    ]
    table = format_table(ratios(recs))
    assert "BullMQ-py" not in table and "2.00x" in table


@pytest.mark.parametrize(
    ("params", "check"),
    [
        (ScenarioParams("add-single", jobs=150), None),
        (ScenarioParams("add-concurrent", jobs=200, inflight=10), None),
        (ScenarioParams("cpu", jobs=200, concurrency=20), "cpu_us_per_job"),
        (ScenarioParams("batch", jobs=200, concurrency=2, batch=10), "note"),
        (ScenarioParams("memory", jobs=600, concurrency=20), "rss_peak_mb"),
        (ScenarioParams("latency", rate=200, seconds=1), "p99_ms"),
    ],
    ids=lambda v: v.scenario if isinstance(v, ScenarioParams) else None,
)
def test_each_implemented_scenario_measures_its_jobs(
    bullmq_py: Path,
    valkey_server: Any,
    queue_name: str,
    tmp_path: Path,
    params: ScenarioParams,
    check: str | None,
) -> None:
    raw = tmp_path / "jobs.jsonl"
    pid = getattr(valkey_server, "pid", None)  # none for a server in Docker
    result = run_system("bullmq-py", params, valkey_server.port, pid, queue_name, raw_out=raw)
    rec = make_record("bullmq-py", params, 0, result)
    assert rec["version"] == "3.4.4" and rec["jobs_per_s"] > 0
    expected = round(params.rate * params.seconds) if params.scenario == "latency" else params.jobs
    assert rec["jobs"] == expected and rec["server_us_per_job"] >= 0
    if check is not None:
        assert rec[check]
    if params.scenario == "latency":
        assert len(result["latencies_ms"]) == expected and rec["p50_ms"] <= rec["p99_ms"]
    if params.scenario in ("cpu", "batch"):
        rows = [orjson.loads(line) for line in raw.read_bytes().splitlines()]
        assert len({r["job_id"] for r in rows}) == params.jobs
        assert all(set(r) == JOB_FIELDS and r["enqueued_ms"] <= r["finished_ms"] for r in rows)
    # The queue is left empty: every job ran (or was removed) and the peer obliterated it.
    assert valkey_server.cli("KEYS", f"bull:{queue_name}:*") == ""


def test_a_scenario_the_peer_lacks_is_recorded_and_shown_as_unsupported(
    bullmq_py: Path, tmp_path: Path
) -> None:
    out = tmp_path / "records.jsonl"
    profile = [ScenarioParams("sandbox", jobs=100, concurrency=2)]
    records = run_profile(profile, 1, out, systems=("glidemq", "bullmq-py"))
    by_system = {r["system"]: r for r in records}
    py = by_system["bullmq-py"]
    assert "no sandboxed" in py["unsupported"]
    assert py["jobs"] == 0 and py["jobs_per_s"] is None and py["server_us_per_job"] is None
    assert by_system["glidemq"]["jobs_per_s"] > 0
    assert len(out.read_bytes().splitlines()) == 2
    summary = ratios(records)
    row = summary["sandbox c=2"]
    assert "ratio_py" not in row and row["unsupported"] == {"bullmq-py": py["unsupported"]}
    table = format_table(summary)
    assert "unsupported" in table.splitlines()[1]
    assert f"sandbox c=2: bullmq-py unsupported: {py['unsupported']}" in table


def test_a_failed_install_raises_peer_error_with_pips_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A copy of the peer with no package index and no local wheels: what an offline machine
    # sees. The real peer's virtualenv is not touched.
    peer = tmp_path / "peer"
    peer.mkdir()
    shutil.copy(PEER_PY_DIR / "requirements.txt", peer)
    (tmp_path / "no-wheels").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    with pytest.raises(PeerError, match=r"pip install -r requirements\.txt") as caught:
        ensure_bullmq_py(quiet=True, peer_dir=peer)
    assert "bullmq" in str(caught.value).split("exited", 1)[1]
    # Nothing is taken as installed: the next call tries again.
    assert not (peer / ".venv" / "glidemq-bench-requirements.sha256").exists()
