"""Side-by-side runs: each scenario for glidemq and BullMQ on one Valkey, alternating order.

Every run is one record (a JSON line). Ratios glidemq / BullMQ are taken pair by pair (the
two runs of one repetition) and summarized by their median, because absolute numbers on a
shared machine drift while ratios inside one run hold. BullMQ for Python (`bullmq-py`) is an
optional third system with a ratio of its own; a scenario its peer does not implement is
recorded with an `unsupported` note and no numbers.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import orjson

from ..cli.progress import Progress
from ..server.cluster import EmbeddedCluster
from ..server.valkey import EmbeddedValkey
from ..spark.records import SCENARIO_METRIC as _METRIC
from ..spark.records import Ratio
from .jobrecords import RAW_SCENARIOS, raw_file_name, read_jsonl, write_parquet
from .peer import (
    DEFAULT_SYSTEMS,
    PYTHON_QUEUES,
    ScenarioParams,
    ensure_system,
    parse_systems,
    run_system,
)

__all__ = [
    "PROFILES",
    "Ratio",
    "format_python_table",
    "make_record",
    "ratios",
    "run_profile",
    "scale_jobs",
]

PROFILES: dict[str, list[ScenarioParams]] = {
    "quick": [
        ScenarioParams("add-bulk", jobs=20_000),
        ScenarioParams("add-concurrent", jobs=10_000, inflight=50),
        ScenarioParams("process", jobs=20_000, concurrency=100),
        ScenarioParams("latency", rate=1000, seconds=3),
    ],
    "ci": [
        ScenarioParams("add-bulk", jobs=10_000),
        ScenarioParams("process", jobs=10_000, concurrency=100),
        ScenarioParams("sandbox", jobs=5_000, concurrency=8),
        ScenarioParams("memory", jobs=20_000, concurrency=100),
    ],
    "full": [
        ScenarioParams("add-single", jobs=5_000),
        ScenarioParams("add-concurrent", jobs=20_000, inflight=50),
        ScenarioParams("add-bulk", jobs=50_000),
        *(ScenarioParams("process", jobs=20_000, concurrency=c) for c in (1, 10, 50, 100)),
        *(ScenarioParams("procs", jobs=100_000, concurrency=50, procs=n) for n in (1, 2, 4, 8)),
        ScenarioParams("latency", rate=1000, seconds=5),
        ScenarioParams("sandbox", jobs=20_000, concurrency=8),
        ScenarioParams("batch", jobs=50_000, concurrency=10, batch=50),
        ScenarioParams("cluster", jobs=60_000, concurrency=50, queues=6),
        ScenarioParams("cpu", jobs=20_000, concurrency=100),
        ScenarioParams("memory", jobs=1_000_000, concurrency=100),
    ],
    # glidemq against the Python job queues (run with --with-python-peers): the scenarios
    # every one of them has, at sizes the slowest (RQ at c=1) finishes in seconds.
    # a sync add one job at a time: glidemq's Task.delay against Celery's .delay() and RQ's
    # enqueue (run with --systems glidemq,celery,rq)
    "sync": [ScenarioParams("add-sync", jobs=3_000)],
    # fair groups (glidemq only: BullMQ has groups in its paid Pro edition)
    "groups": [ScenarioParams("fair", jobs=20_000, concurrency=100, queues=1000)],
    "python": [
        ScenarioParams("add-bulk", jobs=5_000),
        *(ScenarioParams("process", jobs=3_000, concurrency=c) for c in (1, 10, 100)),
    ],
}

# Result fields of the newer scenarios copied into their records as they are.
_EXTRA_FIELDS = (
    *("inprocess_jobs_per_s", "inprocess_seconds", "children", "queues", "note"),
    *("rss_start_mb", "rss_warm_mb", "rss_end_mb", "rss_peak_mb", "rss_growth_mb"),
    *("rss_flat", "rss_samples", "cpu_us_per_job", "unsupported"),
    *("plain_jobs_per_s", "fair_cost", "small_first_ms", "small_last_ms", "small_done_within"),
)

# The systems compared with glidemq: (system, its field in summary rows, its ratios' field).
_PEERS = (("bullmq", "bullmq", "ratios"), ("bullmq-py", "bullmq_py", "ratios_py"))


def scenario_key(rec: dict[str, Any]) -> str:
    """The name a scenario's results are grouped under, e.g. `process c=100`."""
    s = str(rec["scenario"])
    if s == "process":
        return f"process c={rec['concurrency']}"
    if s == "procs":
        return f"procs {rec.get('procs', 1)}x c={rec['concurrency']}"
    if s == "latency":
        return f"latency {int(rec['rate'])}/s"
    if s == "batch":
        return f"batch c={rec['concurrency']} b={rec.get('batch')}"
    if s == "cluster":
        return f"cluster {rec.get('queues')}q c={rec['concurrency']}"
    if s == "fair":
        return f"fair {rec.get('queues')} groups c={rec['concurrency']}"
    if s in ("sandbox", "memory", "cpu"):
        return f"{s} c={rec['concurrency']}"
    return s


def _machine() -> dict[str, Any]:
    return {
        "node": platform.node(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def make_record(
    system: str, params: ScenarioParams, rep: int, result: dict[str, Any]
) -> dict[str, Any]:
    """One JSON record from a run's raw result."""
    seconds = float(result.get("seconds") or 0.0)
    jobs = int(result["jobs"])  # 0 for a scenario the peer does not implement
    rec: dict[str, Any] = {
        "system": system,
        "scenario": params.scenario,
        "jobs": jobs,
        "concurrency": params.concurrency,
        "inflight": params.inflight,
        "rate": params.rate,
        "procs": params.procs,
        "batch": params.batch,
        "queues": params.queues,
        "rep": rep,
        "seconds": seconds,
        "jobs_per_s": jobs / seconds if seconds else None,
        "server_cpu_pct": 100 * result.get("server_cpu", 0.0) / seconds if seconds else None,
        "client_cpu_pct": 100 * result.get("client_cpu", 0.0) / seconds if seconds else None,
        "server_us_per_job": 1e6 * result.get("server_cpu", 0.0) / jobs if jobs else None,
        "client_us_per_job": 1e6 * result.get("client_cpu", 0.0) / jobs if jobs else None,
        "version": result.get("version"),
        "machine": _machine(),
        "ts": time.time(),
    }
    for name in _EXTRA_FIELDS:
        if name in result:
            rec[name] = result[name]
    if rec.get("inprocess_jobs_per_s") and rec["jobs_per_s"]:
        rec["sandbox_vs_inprocess"] = rec["jobs_per_s"] / rec["inprocess_jobs_per_s"]
    lat = result.get("latencies_ms")
    if lat:
        rec.update(
            p50_ms=_pct(lat, 0.50), p95_ms=_pct(lat, 0.95), p99_ms=_pct(lat, 0.99),
            max_ms=max(lat),
        )  # fmt: skip
    return rec


@contextlib.contextmanager
def _cluster_when_needed(profile: Sequence[ScenarioParams]) -> Iterator[EmbeddedCluster | None]:
    """A 3-primary cluster (no replicas: they would only add load) for `cluster` runs."""
    if not any(p.scenario == "cluster" for p in profile):
        yield None
        return
    cluster = EmbeddedCluster(replicas_per_primary=0).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _convert_raw(
    tmp: Path, raw_dir: Path, system: str, params: ScenarioParams, key: str, rep: int
) -> str | None:
    """Turn one run's JSON-lines records into Parquet under `raw_dir`; its path."""
    if not tmp.exists():
        return None
    name = raw_file_name(system, key, rep)
    rows = read_jsonl(tmp)
    try:
        path = write_parquet(
            rows, raw_dir / f"{name}.parquet", system=system, scenario=params.scenario,
            key=key, rep=rep,
        )  # fmt: skip
    except ImportError:  # pyarrow comes with the `spark` extra: keep the JSON lines then
        path = raw_dir / f"{name}.jobs.jsonl"
        raw_dir.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tmp.read_bytes())
    tmp.unlink()
    return str(path)


def run_profile(
    profile: Sequence[ScenarioParams],
    reps: int,
    out: Path | None,
    systems: Sequence[str] = DEFAULT_SYSTEMS,
    progress: Callable[[str], None] | None = None,
    glidemq_extra: list[str] | None = None,
    raw_dir: Path | None = None,
    steps: Progress | None = None,
) -> list[dict[str, Any]]:
    """Run every scenario `reps` times for each system, alternating which goes first.
    `steps` (a `glidemq.cli.progress.Progress` for all of them) is told when each run starts
    and ends.

    With `raw_dir`, the runs of `RAW_SCENARIOS` also write per-job records there, one
    Parquet file per run (see `glidemq.bench.jobrecords`). `systems` (see
    `peer.parse_systems`) are installed first when they need a peer."""
    systems = parse_systems(systems)
    for system in systems:
        ensure_system(system)
    records: list[dict[str, Any]] = []
    total = reps * len(profile) * len(systems)
    step = 0
    with (
        EmbeddedValkey() as server,
        _cluster_when_needed(profile) as cluster,
        tempfile.TemporaryDirectory(prefix="glidemq-bench-") as scratch,
    ):
        for rep in range(reps):
            for params in profile:
                order = list(systems) if rep % 2 == 0 else list(reversed(systems))
                for system in order:
                    step += 1
                    if steps is not None:
                        steps.start(f"{scenario_key(asdict(params))} {system}")
                    extra = glidemq_extra if system == "glidemq" else None
                    raw = None
                    if raw_dir is not None and params.scenario in RAW_SCENARIOS:
                        raw = Path(scratch) / f"{system}-{step}.jsonl"
                    if params.scenario == "cluster" and cluster is not None:
                        for node in cluster.nodes:
                            node.execute("FLUSHALL")
                        result = run_system(
                            system, params, cluster.nodes[0].port,
                            [n.pid for n in cluster.nodes if n.pid], f"bench-{system}", extra,
                            url=cluster.url, raw_out=raw,
                        )  # fmt: skip
                    else:
                        server.execute("FLUSHALL")
                        result = run_system(
                            system, params, server.port, server.pid, f"bench-{system}", extra,
                            raw_out=raw,
                        )  # fmt: skip
                    rec = make_record(system, params, rep, result)
                    if raw is not None and raw_dir is not None:
                        key = scenario_key(rec)
                        rec["raw"] = _convert_raw(raw, raw_dir, system, params, key, rep)
                    records.append(rec)
                    if out is not None:
                        with out.open("ab") as fh:
                            fh.write(orjson.dumps(rec) + b"\n")
                    if steps is not None:
                        steps.done()
                    if progress is not None:
                        progress(f"[{step}/{total}] {scenario_key(rec)} {system}: {_headline(rec)}")
    return records


def _headline(rec: dict[str, Any]) -> str:
    if rec.get("unsupported"):
        return f"unsupported ({rec['unsupported']})"
    if rec["scenario"] == "latency":
        return f"p50 {rec['p50_ms']:.2f} / p99 {rec['p99_ms']:.2f} ms"
    line = f"{rec['jobs_per_s']:,.0f} jobs/s"
    if rec["scenario"] == "memory":
        line += f", RSS peak {rec['rss_peak_mb']:.0f} MiB, growth {rec['rss_growth_mb']:+.1f}"
    elif rec["scenario"] == "cpu":
        line += f", {rec['cpu_us_per_job']:.0f} CPU us/job"
    elif rec.get("sandbox_vs_inprocess"):
        line += f" ({rec['sandbox_vs_inprocess']:.2f}x its in-process run)"
    return line


def ratios(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per scenario: glidemq / BullMQ of its metric, taken pair by pair, with medians.

    With BullMQ for Python records, also `ratio_py` (glidemq / BullMQ for Python) and its
    medians; sides that did not implement the scenario are named in `unsupported`."""
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for rec in records:
        pairs.setdefault((scenario_key(rec), rec["rep"]), {})[rec["system"]] = rec
    out: dict[str, dict[str, Any]] = {}
    for (key, _), pair in sorted(pairs.items()):
        g = pair.get("glidemq")
        if g is None or g.get("unsupported"):
            continue
        metric, higher = _METRIC[g["scenario"]]
        row = out.setdefault(
            key,
            {
                "metric": metric,
                "higher_is_better": higher,
                "glidemq": [],
                "bullmq": [],
                "ratios": [],
            },
        )
        row["glidemq"].append(g[metric])
        _add_cpu(row, "glidemq", g)
        for system, field, ratio_field in _PEERS:
            side = pair.get(system)
            if side is None:
                continue
            if side.get("unsupported"):
                row.setdefault("unsupported", {})[system] = side["unsupported"]
                continue
            row.setdefault(field, []).append(side[metric])
            value = g[metric] / side[metric] if side[metric] else float("nan")
            row.setdefault(ratio_field, []).append(value)
            _add_cpu(row, field, side)
        for system in PYTHON_QUEUES:
            _add_python_queue(row, system, pair.get(system), g[metric], metric)
    names = {"ratios": "ratio", "ratios_py": "ratio_py"}
    for row in out.values():
        for k in list(row):
            if isinstance(row[k], list) and row[k]:
                row[names.get(k, f"median_{k}")] = statistics.median(row[k])
        for side in row.get("python_queues", {}).values():
            for k in list(side):
                if isinstance(side[k], list) and side[k]:
                    side[f"median_{k}"] = statistics.median(side[k])
    return out


def _add_python_queue(
    row: dict[str, Any], system: str, side: dict[str, Any] | None, mine: float, metric: str
) -> None:
    """One Python queue's run into `row["python_queues"][system]`: its metric, glidemq / it,
    CPU per job, its note; or the reason it did not run."""
    if side is None:
        return
    entry = row.setdefault("python_queues", {}).setdefault(system, {"version": side["version"]})
    if side.get("note"):
        entry["note"] = side["note"]
    if side.get("unsupported"):
        entry["unsupported"] = side["unsupported"]
        return
    value = side[metric]
    entry.setdefault("value", []).append(value)
    entry.setdefault("ratio", []).append(mine / value if value else float("nan"))
    entry.setdefault("server_us", []).append(side["server_us_per_job"])
    entry.setdefault("client_us", []).append(side["client_us_per_job"])


def format_python_table(summary: dict[str, dict[str, Any]]) -> str:
    """glidemq against each Python job queue that ran: per scenario its median and the
    ratio glidemq / it (empty when none ran)."""
    systems = [
        s
        for s in PYTHON_QUEUES
        if any(s in row.get("python_queues", {}) for row in summary.values())
    ]
    if not systems:
        return ""
    head = f"{'scenario':<16} {'glidemq':>9}" + "".join(f" {s:>16}" for s in systems)
    lines = [head]
    for key, row in summary.items():
        cells = []
        for s in systems:
            entry = row.get("python_queues", {}).get(s)
            if entry is None or entry.get("unsupported"):
                cells.append(f" {'-' if entry is None else 'unsupported':>16}")
            else:
                value = _fmt(entry["median_value"], row["metric"])
                cell = f"{value} ({entry['median_ratio']:.1f}x)"
                cells.append(f" {cell:>16}")
        mine = _fmt(row.get("median_glidemq"), row["metric"])
        lines.append(f"{key:<16} {mine:>9}" + "".join(cells))
    lines.append(
        "cells: the queue's median (glidemq / it, median of pairs); jobs/s, or as the main "
        "table's metric"
    )
    for s in systems:
        notes: dict[str, None] = {}
        versions: dict[str, None] = {}
        for key, row in summary.items():
            entry = row.get("python_queues", {}).get(s)
            if entry is None:
                continue
            versions[str(entry["version"])] = None
            if entry.get("unsupported"):
                notes[f"{key} unsupported: {entry['unsupported']}"] = None
            else:  # the same settings repeat in each scenario's note: each part once
                notes.update(dict.fromkeys(p for p in entry.get("note", "").split("; ") if p))
        lines.append(f"{s} {', '.join(versions)}: " + " | ".join(notes))
    return "\n".join(lines)


def _add_cpu(row: dict[str, Any], who: str, side: dict[str, Any]) -> None:
    row.setdefault(f"{who}_server_us", []).append(side["server_us_per_job"])
    row.setdefault(f"{who}_client_us", []).append(side["client_us_per_job"])
    if side.get("sandbox_vs_inprocess"):
        row.setdefault(f"{who}_vs_inprocess", []).append(side["sandbox_vs_inprocess"])


def _fmt(v: Any, metric: str) -> str:
    if v is None:
        return "-"
    return f"{v:,.2f} ms" if metric.endswith("_ms") else f"{v:,.0f}"


def _times(ratio: Any) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _side(row: dict[str, Any], who: str, system: str) -> str:
    """A system's median in the table, or `unsupported` when its peer lacks the scenario."""
    if system in row.get("unsupported", {}):
        return "unsupported"
    return _fmt(row.get(f"median_{who}"), row["metric"])


def _cpu_cells(row: dict[str, Any], kind: str, sides: Sequence[str]) -> str:
    cells = []
    for who in sides:
        name = f"median_{who}_{kind}_us"
        cells.append("-" if who == "bullmq_py" and name not in row else f"{row.get(name, 0):.1f}")
    return "/".join(cells)


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table printed by the CLI and written to reports; the BullMQ for
    Python columns only when that system ran."""
    with_py = any(
        "median_bullmq_py" in row or "bullmq-py" in row.get("unsupported", {})
        for row in summary.values()
    )
    sides = ("glidemq", "bullmq", "bullmq_py") if with_py else ("glidemq", "bullmq")
    cpu_w, who = (20, "g/b/p") if with_py else (18, "g/b")
    py_head = f" {'BullMQ-py':>12} {'ratio py':>8}" if with_py else ""
    lines = [
        f"{'scenario':<20} {'metric':<11} {'glidemq':>12} {'BullMQ':>12} {'ratio':>7}{py_head}  "
        f"{f'server us/job {who}':>{cpu_w}} {f'client us/job {who}':>{cpu_w}}",
    ]
    for key, row in summary.items():
        py = ""
        if with_py:
            py = f" {_side(row, 'bullmq_py', 'bullmq-py'):>12} {_times(row.get('ratio_py')):>8}"
        lines.append(
            f"{key:<20} {row['metric']:<11} {_fmt(row.get('median_glidemq'), row['metric']):>12} "
            f"{_side(row, 'bullmq', 'bullmq'):>12} {_times(row.get('ratio')):>7}{py}  "
            f"{_cpu_cells(row, 'server', sides):>{cpu_w}} "
            f"{_cpu_cells(row, 'client', sides):>{cpu_w}}"
        )
    lines.append(
        "ratio = glidemq / BullMQ, median of pairs; lower is better for latency (p99_ms), "
        "memory (rss_peak_mb) and cpu (cpu_us_per_job)."
    )
    if with_py:
        lines.append("ratio py = glidemq / BullMQ for Python (bullmq-py), median of pairs.")
    for key, row in summary.items():
        if "median_glidemq_vs_inprocess" in row:
            parts = [
                f"{name} {row[f'median_{w}_vs_inprocess']:.2f}x"
                for w, name in (("glidemq", "glidemq"), ("bullmq", "BullMQ"))
                if f"median_{w}_vs_inprocess" in row
            ]
            lines.append(f"{key}: sandboxed / in-process jobs/s: {', '.join(parts)}")
        for system, note in sorted(row.get("unsupported", {}).items()):
            lines.append(f"{key}: {system} unsupported: {note}")
    return "\n".join(lines)


def scale_jobs(profile: Sequence[ScenarioParams], factor: float) -> list[ScenarioParams]:
    """The profile with job counts (and latency durations) scaled, for short runs."""
    if factor == 1.0:
        return list(profile)
    return [
        replace(p, jobs=max(100, int(p.jobs * factor)), seconds=max(1.0, p.seconds * factor))
        for p in profile
    ]
