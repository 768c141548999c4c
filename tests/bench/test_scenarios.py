"""The benchmark scenarios beyond add/process, at tiny job counts: each runs on both systems
(BullMQ when Node is there) and records the fields the harness and the report read. No
speed is asserted: a shared 2-core machine makes any number meaningless here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from glidemq.bench.harness import PROFILES, make_record, run_profile, scenario_key
from glidemq.bench.jobrecords import COLUMNS, read_jsonl, write_parquet
from glidemq.bench.peer import ScenarioParams, ensure_bullmq, run_system

JOB_FIELDS = {"queue", "job_id", "enqueued_ms", "started_ms", "finished_ms", "pid"}
SYSTEMS = ["glidemq", "bullmq"]


def _need(system: str) -> None:
    if system == "bullmq":
        if shutil.which("node") is None or shutil.which("npm") is None:
            pytest.skip("Node.js and npm are needed for the BullMQ side of the benchmark")
        ensure_bullmq(quiet=True)


def _run(
    system: str,
    params: ScenarioParams,
    server: Any,
    queue: str,
    tmp_path: Path,
    **kw: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    raw = tmp_path / f"{system}.jsonl"
    result = run_system(
        system, params, server.port, server.pid, f"{queue}-{system}", raw_out=raw, **kw
    )
    rec = make_record(system, params, 0, result)
    assert rec["jobs"] == params.jobs and rec["jobs_per_s"] > 0
    # server CPU came from /proc; at this tiny N it may round to 0 (10 ms clock ticks)
    assert rec["server_us_per_job"] is not None and rec["server_us_per_job"] >= 0
    return rec, read_jsonl(raw) if raw.exists() else []


def _check_jobs(rows: list[dict[str, Any]], n: int) -> None:
    assert len(rows) == n and len({(r["queue"], r["job_id"]) for r in rows}) == n
    for row in rows:
        assert set(row) == JOB_FIELDS
        assert row["enqueued_ms"] <= row["finished_ms"] and row["pid"] > 0


@pytest.mark.parametrize("system", SYSTEMS)
async def test_sandbox_scenario_runs_both_sandboxed_and_in_process(
    system: str, valkey_server: Any, queue_name: str, tmp_path: Path
) -> None:
    _need(system)
    params = ScenarioParams("sandbox", jobs=200, concurrency=4)
    rec, rows = _run(system, params, valkey_server, queue_name, tmp_path)
    assert scenario_key(rec) == "sandbox c=4"
    assert rec["inprocess_jobs_per_s"] > 0 and rec["sandbox_vs_inprocess"] > 0
    _check_jobs(rows, 200)
    # The jobs ran in child processes, not in the process that ran the scenario.
    assert rec["client_cpu_pct"] is not None
    assert len({row["pid"] for row in rows}) >= 2


@pytest.mark.parametrize("system", SYSTEMS)
async def test_batch_scenario(
    system: str, valkey_server: Any, queue_name: str, tmp_path: Path
) -> None:
    _need(system)
    params = ScenarioParams("batch", jobs=200, concurrency=2, batch=10)
    rec, rows = _run(system, params, valkey_server, queue_name, tmp_path)
    assert scenario_key(rec) == "batch c=2 b=10" and rec["batch"] == 10
    _check_jobs(rows, 200)


async def test_fair_scenario_measures_the_cost_and_the_small_tenants_wait(
    valkey_server: Any, queue_name: str, tmp_path: Path
) -> None:
    params = ScenarioParams("fair", jobs=400, concurrency=10, queues=50)
    rec, _ = _run("glidemq", params, valkey_server, queue_name, tmp_path)
    assert scenario_key(rec) == "fair 50 groups c=10"
    assert rec["plain_jobs_per_s"] > 0 and rec["fair_cost"] < 1
    assert 0 <= rec["small_first_ms"] <= rec["small_last_ms"]
    # the small tenant's 10 jobs were served in turn with the big backlog's
    assert rec["small_done_within"] <= 40
    unsupported = run_system("bullmq", params, valkey_server.port, valkey_server.pid, queue_name)
    assert "unsupported" in unsupported and unsupported["jobs"] == 0


@pytest.mark.cluster
@pytest.mark.parametrize("system", SYSTEMS)
async def test_cluster_scenario_spreads_queues_over_the_primaries(
    system: str, valkey_cluster: Any, queue_name: str, tmp_path: Path
) -> None:
    _need(system)
    params = ScenarioParams("cluster", jobs=300, concurrency=4, queues=3)
    nodes = valkey_cluster.nodes
    raw = tmp_path / "jobs.jsonl"
    result = run_system(
        system, params, nodes[0].port, [n.pid for n in nodes], f"{queue_name}-{system}",
        url=valkey_cluster.url, raw_out=raw,
    )  # fmt: skip
    rec = make_record(system, params, 0, result)
    assert scenario_key(rec) == "cluster 3q c=4" and rec["queues"] == 3
    # Server CPU is read in 10 ms clock ticks per node: 300 jobs over three primaries
    # can round to zero, so only its presence is a pass/fail matter here.
    assert rec["jobs"] == 300 and rec["server_us_per_job"] >= 0
    _check_jobs(read_jsonl(raw), 300)


@pytest.mark.parametrize("system", SYSTEMS)
async def test_memory_scenario_samples_rss(
    system: str, valkey_server: Any, queue_name: str, tmp_path: Path
) -> None:
    _need(system)
    params = ScenarioParams("memory", jobs=2_000, concurrency=20)
    rec, rows = _run(system, params, valkey_server, queue_name, tmp_path)
    assert scenario_key(rec) == "memory c=20" and rows == []  # no per-job records here
    samples = rec["rss_samples"]
    assert len(samples) >= 2 and samples[-1][1] == 2_000  # [seconds, completed, rss MiB]
    assert all(s[2] > 10 for s in samples)
    assert rec["rss_peak_mb"] >= rec["rss_end_mb"] > 0
    assert rec["rss_growth_mb"] == pytest.approx(rec["rss_end_mb"] - rec["rss_warm_mb"])
    assert isinstance(rec["rss_flat"], bool)


@pytest.mark.parametrize("system", SYSTEMS)
async def test_cpu_scenario_reports_cpu_per_job(
    system: str, valkey_server: Any, queue_name: str, tmp_path: Path
) -> None:
    _need(system)
    params = ScenarioParams("cpu", jobs=300, concurrency=20)
    rec, rows = _run(system, params, valkey_server, queue_name, tmp_path)
    assert scenario_key(rec) == "cpu c=20"
    expected = rec["server_us_per_job"] + rec["client_us_per_job"]
    assert rec["cpu_us_per_job"] == pytest.approx(expected) and expected > 0
    _check_jobs(rows, 300)


def test_job_records_become_parquet_with_the_documented_columns(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    rows = [
        {
            "queue": "q",
            "job_id": "1",
            "enqueued_ms": 1.0,
            "started_ms": 2.0,
            "finished_ms": 3.0,
            "pid": 7,
        },
        {
            "queue": "q",
            "job_id": "2",
            "enqueued_ms": 1.5,
            "started_ms": None,
            "finished_ms": 4.0,
            "pid": 8,
        },
    ]
    path = write_parquet(
        rows, tmp_path / "x.parquet", system="glidemq", scenario="process", key="process c=1",
        rep=2,
    )  # fmt: skip
    table = pq.read_table(path)
    assert table.column_names == [name for name, _ in COLUMNS]
    assert table.to_pylist()[1] == {
        "system": "glidemq", "scenario": "process", "scenario_key": "process c=1", "rep": 2,
        "queue": "q", "job_id": "2", "enqueued_ms": 1.5, "started_ms": None,
        "finished_ms": 4.0, "pid": 8,
    }  # fmt: skip


def test_a_profile_run_writes_job_records_as_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "records.jsonl"
    profile = [ScenarioParams("process", jobs=150, concurrency=10)]
    records = run_profile(profile, 1, out, systems=("glidemq",), raw_dir=tmp_path / "jobs")
    (rec,) = records
    assert rec["raw"] and Path(rec["raw"]).suffix == ".parquet"
    table = pq.read_table(rec["raw"])
    assert table.num_rows == 150 and set(table.column("system").to_pylist()) == {"glidemq"}
    assert orjson.loads(out.read_bytes().splitlines()[0])["raw"] == rec["raw"]


def test_the_full_profile_has_every_scenario_and_eight_processes() -> None:
    full = PROFILES["full"]
    assert {p.scenario for p in full} >= {"sandbox", "batch", "cluster", "memory", "cpu"}
    assert max(p.procs for p in full if p.scenario == "procs") == 8
    (memory,) = [p for p in full if p.scenario == "memory"]
    assert memory.jobs == 1_000_000
    assert all(p.jobs <= 20_000 for p in PROFILES["ci"] if p.scenario == "memory")
    assert {p.scenario for p in PROFILES["quick"]} == {
        "add-bulk", "add-concurrent", "process", "latency",
    }  # fmt: skip
