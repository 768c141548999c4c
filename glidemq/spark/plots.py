"""PNG plots of the report tables (matplotlib, no display needed).

Each function takes rows of one table (as returned by `run_pipeline`), writes one PNG and
returns its path, or returns None when the table has nothing to plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "plot_cpu_per_job",
    "plot_latency_percentiles",
    "plot_ledger_latency_cdf",
    "plot_ledger_recovery",
    "plot_ledger_throughput",
    "plot_throughput_vs_concurrency",
    "plot_throughput_vs_procs",
]

Rows = Sequence[dict[str, Any]]
_COLORS = {"glidemq": "#1f77b4", "bullmq": "#d62728"}


def _figure(width: float = 7.0, height: float = 4.2) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def _save(fig: Figure, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path)
    return path


def _color(system: str, i: int) -> str:
    return _COLORS.get(system, f"C{i + 2}")


def _systems(rows: Rows) -> list[str]:
    """System names, glidemq first, then BullMQ, then any others."""
    order = {"glidemq": 0, "bullmq": 1}
    return sorted({str(r["system"]) for r in rows}, key=lambda s: (order.get(s, 2), s))


def _bars(
    ax: Axes, groups: list[str], series: dict[str, list[float]], label_fmt: str = "{:,.0f}"
) -> None:
    n = max(1, len(series))
    width = 0.8 / n
    for i, (system, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=system, color=_color(system, i))
        ax.bar_label(bars, labels=[label_fmt.format(v) for v in values], fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.margins(y=0.12)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def plot_throughput_vs_concurrency(rows: Rows, path: Path) -> Path | None:
    """Median jobs/s of the `process` scenario against worker concurrency, a line per system."""
    if not rows:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for i, system in enumerate(_systems(rows)):
        points = sorted(
            (int(r["concurrency"]), float(r["median_jobs_per_s"]))
            for r in rows
            if r["system"] == system and r["median_jobs_per_s"] is not None
        )
        ax.plot(
            [c for c, _ in points],
            [v for _, v in points],
            marker="o",
            label=system,
            color=_color(system, i),
        )
    concurrencies = sorted({int(r["concurrency"]) for r in rows})
    if len(concurrencies) > 1 and concurrencies[0] > 0:
        ax.set_xscale("log")
    ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
    ax.set_xlabel("worker concurrency")
    ax.set_ylabel("jobs / s (median of runs)")
    ax.set_ylim(bottom=0)
    ax.set_title("Processing throughput vs concurrency")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_throughput_vs_procs(rows: Rows, path: Path) -> Path | None:
    """Median jobs/s of the `procs` scenario against the number of worker processes, a line
    per system."""
    rows = [r for r in rows if r.get("procs") is not None and r["median_jobs_per_s"] is not None]
    if not rows:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for i, system in enumerate(_systems(rows)):
        points = sorted(
            (int(r["procs"]), float(r["median_jobs_per_s"])) for r in rows if r["system"] == system
        )
        ax.plot(
            [n for n, _ in points],
            [v for _, v in points],
            marker="o",
            label=system,
            color=_color(system, i),
        )
    counts = sorted({int(r["procs"]) for r in rows})
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.set_xlabel("worker processes")
    ax.set_ylabel("jobs / s (median of runs)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs worker processes")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_latency_percentiles(rows: Rows, path: Path) -> Path | None:
    """p50 / p95 / p99 latency bars per system (median over the runs of each scenario)."""
    rows = [r for r in rows if r.get("median_p50_ms") is not None]
    if not rows:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    groups = ["p50", "p95", "p99"]
    series: dict[str, list[float]] = {}
    multi = len({r["scenario_key"] for r in rows}) > 1
    systems = _systems(rows)
    for r in sorted(rows, key=lambda r: (str(r["scenario_key"]), systems.index(str(r["system"])))):
        label = f"{r['system']} {r['scenario_key']}" if multi else str(r["system"])
        series[label] = [float(r[f"median_{g}_ms"] or 0.0) for g in groups]
    _bars(ax, groups, series, "{:.2f}")
    ax.set_ylabel("latency, ms (producer add to completion)")
    ax.set_title("Latency percentiles")
    return _save(fig, path)


def plot_cpu_per_job(rows: Rows, path: Path) -> Path | None:
    """Server and client CPU µs per job, per scenario, bars per system."""
    rows = [r for r in rows if r.get("median_server_us_per_job") is not None]
    if not rows:
        return None
    scenarios = sorted({str(r["scenario_key"]) for r in rows})
    systems = _systems(rows)
    fig = _figure(max(7.0, 1.6 * len(scenarios) + 2), 6.0)
    for k, (side, title) in enumerate((("server", "Valkey server"), ("client", "client"))):
        ax = fig.add_subplot(2, 1, k + 1)
        series: dict[str, list[float]] = {}
        for system in systems:
            by_key = {r["scenario_key"]: r for r in rows if r["system"] == system}
            series[system] = [
                float(by_key[s][f"median_{side}_us_per_job"] or 0.0) if s in by_key else 0.0
                for s in scenarios
            ]
        _bars(ax, scenarios, series, "{:.1f}")
        ax.set_ylabel("CPU µs / job")
        ax.set_title(f"{title} CPU per job")
    return _save(fig, path)


def plot_ledger_throughput(rows: Rows, path: Path) -> Path | None:
    """Completions per second over each chaos run."""
    if not rows:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for i, run in enumerate(sorted({str(r["run"]) for r in rows})):
        points = sorted((int(r["second"]), int(r["completions"])) for r in rows if r["run"] == run)
        points.append((points[-1][0] + 1, points[-1][1]))  # draw the last second's step too
        ax.plot(
            [s for s, _ in points],
            [c for _, c in points],
            label=run,
            color=f"C{i}",
            drawstyle="steps-post",
        )
    ax.set_xlabel("seconds since the run's first event")
    ax.set_ylabel("completions / s")
    ax.set_ylim(bottom=0)
    ax.set_title("Chaos ledger: throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_ledger_latency_cdf(rows: Rows, path: Path) -> Path | None:
    """Cumulative distribution of enqueue-to-completion latency per chaos run."""
    if not rows:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    for i, run in enumerate(sorted({str(r["run"]) for r in rows})):
        points = sorted(
            (float(r["latency_ms"]), float(r["fraction"])) for r in rows if r["run"] == run
        )
        ax.plot([v for v, _ in points], [f for _, f in points], label=run, color=f"C{i}")
    ax.set_xlabel("enqueue to completion, ms")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.set_title("Chaos ledger: latency CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_ledger_recovery(rows: Rows, path: Path) -> Path | None:
    """Recovery time per fault kind: one dot per fault (the run's recovery time, or the
    time to the next completion, hollow, when that is all the ledger has)."""
    points = [r for r in rows if r["recovery_s"] is not None or r["next_completion_s"] is not None]
    if not points:
        return None
    kinds = sorted({str(r["kind"]) for r in points})
    fig = _figure()
    ax = fig.add_subplot()
    for i, kind in enumerate(kinds):
        mine = [r for r in points if str(r["kind"]) == kind]
        full = [float(r["recovery_s"]) for r in mine if r["recovery_s"] is not None]
        nxt = [float(r["next_completion_s"]) for r in mine if r["recovery_s"] is None]
        jitter = [i + 0.08 * ((j % 5) - 2) for j in range(len(full) + len(nxt))]
        ax.scatter(jitter[: len(full)], full, color=f"C{i}", s=18)
        ax.scatter(jitter[len(full) :], nxt, facecolors="none", edgecolors=f"C{i}", s=18)
        if full or nxt:
            ax.hlines(max(full + nxt), i - 0.3, i + 0.3, color=f"C{i}", linewidth=1)
    ax.set_xticks(range(len(kinds)), kinds, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.set_title("Chaos ledger: recovery time per fault kind (line: longest)")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)
