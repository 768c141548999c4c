"""`glidemq-bench`: glidemq and BullMQ side by side on one embedded Valkey.

glidemq-bench quick                      add / process / latency, both systems, ~2 min
glidemq-bench run --profile full --reps 5 --out results/ [--raw] [--only sandbox,process]
glidemq-bench quick --with-bullmq-py     also BullMQ for Python (optional, installed on first use)
glidemq-bench run --systems glidemq,bullmq,bullmq-py ...
glidemq-bench quick --with-python-peers  also Celery, Dramatiq, arq, RQ, SAQ, Taskiq (optional)
glidemq-bench run --profile python --with-python-peers   glidemq vs the Python queues
glidemq-bench gate [--baseline FILE] [--tolerance 0.10]   (default: the committed CI baseline)
glidemq-bench report results/
glidemq-bench locust [--users 20 --seconds 20]   Locust load test, headless
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from ..cli.progress import Progress
from . import loadtest
from .harness import PROFILES, format_python_table, format_table, ratios, run_profile, scale_jobs
from .peer import DEFAULT_SYSTEMS, PYTHON_QUEUES, SYSTEMS, PeerError, ScenarioParams, parse_systems

__all__ = ["CI_BASELINE", "gate_check", "main", "select_scenarios"]

CI_BASELINE = Path(__file__).with_name("baselines") / "ci.json"
"""The committed baseline of the `ci` profile that `gate` uses without `--baseline`."""


def _results_path(out: str | None) -> Path | None:
    if out is None:
        return None
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path / f"records-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"


def _load_records(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"glidemq-bench: no .jsonl records in {path}")
    records = []
    for f in files:
        for line in f.read_bytes().splitlines():
            if line.strip():
                records.append(orjson.loads(line))
    return records


def gate_check(
    summary: dict[str, dict[str, Any]], baseline: dict[str, float], tolerance: float
) -> list[str]:
    """Scenarios whose ratio fell beyond `tolerance` from the baseline's (empty: passed)."""
    failures = []
    for key, base in baseline.items():
        row = summary.get(key)
        if row is None or row.get("ratio") is None:
            failures.append(f"{key}: not measured in this run")
            continue
        ratio = row["ratio"]
        if row["higher_is_better"]:
            limit = base * (1 - tolerance)
            if ratio < limit:
                failures.append(
                    f"{key}: ratio {ratio:.2f}x fell below {limit:.2f}x "
                    f"(baseline {base:.2f}x - {tolerance:.0%})"
                )
        else:
            limit = base * (1 + tolerance)
            if ratio > limit:
                failures.append(
                    f"{key}: ratio {ratio:.2f}x rose above {limit:.2f}x "
                    f"(baseline {base:.2f}x + {tolerance:.0%}; lower is better)"
                )
    return failures


def _systems(args: argparse.Namespace) -> tuple[str, ...]:
    """The systems `--systems`, `--with-bullmq-py` and `--with-python-peers` ask for
    (ValueError when invalid)."""
    systems = parse_systems(args.systems if args.systems is not None else DEFAULT_SYSTEMS)
    if args.with_bullmq_py and "bullmq-py" not in systems:
        systems = (*systems, "bullmq-py")
    if getattr(args, "with_python_peers", False):
        systems = (*systems, *(s for s in PYTHON_QUEUES if s not in systems))
    return systems


def select_scenarios(profile: Sequence[ScenarioParams], only: str) -> list[ScenarioParams]:
    """The scenarios of `profile` named in `only` (comma-separated), in profile order;
    ValueError naming the valid ones when a name is not in the profile."""
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    names = list(dict.fromkeys(p.scenario for p in profile))
    unknown = [name for name in wanted if name not in names]
    if unknown or not wanted:
        missing = ", ".join(unknown) or repr(only)
        raise ValueError(f"{missing} not in this profile; choose from {', '.join(names)}")
    return [p for p in profile if p.scenario in wanted]


def _cmd_run(args: argparse.Namespace, profile_name: str) -> tuple[int, dict[str, Any]]:
    try:
        systems = _systems(args)
    except ValueError as exc:
        print(f"glidemq-bench: --systems: {exc}", file=sys.stderr)
        return 2, {}
    if getattr(args, "only", None):
        try:
            select_scenarios(PROFILES[profile_name], args.only)
        except ValueError as exc:
            print(f"glidemq-bench: --only: {exc}", file=sys.stderr)
            return 2, {}
    out = _results_path(args.out)
    print(
        f"glidemq-bench {profile_name}: {args.reps} repetitions of {', '.join(systems)}, "
        "systems alternate; progress on stderr",
        file=sys.stderr,
    )
    extra = ["--plant-delay-us", str(args.plant_delay_us)] if args.plant_delay_us else None
    raw_dir = None
    if getattr(args, "raw", False):
        if out is None:
            print("glidemq-bench: --raw needs --out DIR", file=sys.stderr)
            return 2, {}
        raw_dir = out.parent / "jobs"
    try:
        profile = scale_jobs(PROFILES[profile_name], args.scale)
        if getattr(args, "only", None):
            profile = select_scenarios(profile, args.only)
        # A live line (step k of n, elapsed, time left) only on a terminal; CI logs get
        # the one result line per run.
        total = args.reps * len(profile) * len(parse_systems(systems))
        with Progress(total, name="glidemq-bench") as steps:
            records = run_profile(
                profile, args.reps, out, systems=systems, progress=steps.note,
                glidemq_extra=extra, raw_dir=raw_dir, steps=steps,
            )  # fmt: skip
    except PeerError as exc:
        print(f"glidemq-bench: error: {exc}", file=sys.stderr)
        return 2, {}
    summary = ratios(records)
    print(format_table(summary))
    python_table = format_python_table(summary)
    if python_table:
        print("\nglidemq vs the Python queues\n" + python_table)
    if out is not None:
        print(f"records: {out}", file=sys.stderr)
    if raw_dir is not None:
        print(f"per-job records (Parquet): {raw_dir}", file=sys.stderr)
    return 0, summary


def _cmd_gate(args: argparse.Namespace) -> int:
    if args.write_baseline is None and args.baseline is None:
        if args.profile != "ci" or not CI_BASELINE.exists():
            print(
                "glidemq-bench gate: --baseline FILE (or --write-baseline FILE) is required",
                file=sys.stderr,
            )
            return 2
        args.baseline = str(CI_BASELINE)
    if args.results:
        summary = ratios(_load_records(Path(args.results)))
        print(format_table(summary))
    else:
        code, summary = _cmd_run(args, args.profile)
        if code:
            return code
    if args.write_baseline:
        data = {
            "profile": args.profile,
            "ratios": {k: round(v["ratio"], 4) for k, v in summary.items() if "ratio" in v},
            "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        Path(args.write_baseline).write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        print(f"baseline written to {args.write_baseline}")
        return 0
    baseline = orjson.loads(Path(args.baseline).read_bytes())["ratios"]
    failures = gate_check(summary, baseline, args.tolerance)
    if failures:
        print("REGRESSION:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"gate passed: {len(baseline)} scenarios within {args.tolerance:.0%} of the baseline")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    """Tables and plots through the Spark pipeline; a plain table when Spark is missing."""
    results = Path(args.results)
    out = Path(args.output) if args.output else results / "report"
    if not args.plain:
        from ..spark import run_pipeline
        from ..spark.session import SparkUnavailableError

        try:
            run_pipeline(results, out, master=args.master)
        except SparkUnavailableError as exc:
            print(
                f"glidemq-bench: Spark unavailable ({exc}); writing the plain report",
                file=sys.stderr,
            )
        except FileNotFoundError as exc:
            print(f"glidemq-bench: {exc}", file=sys.stderr)
            return 2
        else:
            report = out / "report.md"
            print(report.read_text())
            plots = sorted((out / "plots").glob("*.png"))
            print(f"report, tables and plots written to {out}", file=sys.stderr)
            print(f"report: {report}", file=sys.stderr)
            print(
                f"plots ({len(plots)}): {out / 'plots'}" + "".join(f"\n  {p}" for p in plots),
                file=sys.stderr,
            )
            return 0
    return _plain_report(_load_records(results), out)


def _plain_report(records: list[dict[str, Any]], out: Path) -> int:
    summary = ratios(records)
    machines = {r["machine"]["node"]: r["machine"] for r in records if "machine" in r}
    lines = ["# glidemq benchmark report", ""]
    for m in machines.values():
        lines.append(
            f"Machine: {m['node']} ({m['machine']}, {m['cpus']} CPUs, "
            f"Python {m['python']}, {m['platform']})"
        )
    versions = sorted({f"{r['system']} {r.get('version')}" for r in records})
    lines += [
        f"Versions: {', '.join(versions)}",
        f"Runs: {len(records)}",
        "",
        "```",
        format_table(summary),
        "```",
        "",
    ]
    for key, row in summary.items():
        if row.get("ratios"):
            spread = f"{min(row['ratios']):.2f}x..{max(row['ratios']):.2f}x"
            lines.append(
                f"- {key}: ratio {row['ratio']:.2f}x (pairs {spread}, "
                f"n={len(row['ratios'])}, stdev "
                f"{statistics.pstdev(row['ratios']):.2f})"
            )
        if row.get("ratios_py"):
            lines.append(
                f"- {key}: ratio to BullMQ for Python {row['ratio_py']:.2f}x "
                f"(n={len(row['ratios_py'])})"
            )
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    print(text)
    print(f"report written to {out / 'report.md'}", file=sys.stderr)
    print(
        "plots: none (the plain report has no plots; they need Spark and matplotlib)",
        file=sys.stderr,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="glidemq-bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    sub = p.add_subparsers(dest="command", required=True)
    add = partial(sub.add_parser, allow_abbrev=False)  # no prefix matching of flags

    def common(sp: argparse.ArgumentParser, reps: int) -> None:
        sp.add_argument("--reps", type=int, default=reps, help=f"repetitions (default {reps})")
        sp.add_argument("--out", help="directory for the JSON-lines records")
        sp.add_argument(
            "--scale", type=float, default=1.0, help="multiply every job count (default 1.0)"
        )
        sp.add_argument(
            "--systems",
            help=f"systems to run, comma-separated, from {','.join(SYSTEMS)} "
            f"(default {','.join(DEFAULT_SYSTEMS)}; glidemq is required)",
        )
        sp.add_argument(
            "--with-bullmq-py",
            action="store_true",
            help="also run BullMQ for Python (optional peer, installed on first use)",
        )
        sp.add_argument(
            "--with-python-peers",
            action="store_true",
            help=f"also run the Python job queues ({', '.join(PYTHON_QUEUES)}); each is "
            "installed into a virtualenv of its own on first use",
        )
        # Test hook: a deliberate per-job slowdown of glidemq, to prove the gate trips.
        sp.add_argument("--plant-delay-us", type=int, default=0, help=argparse.SUPPRESS)

    common(add("quick", help="add / process / latency side by side"), 3)
    run = add("run", help="run a profile")
    run.add_argument("--profile", choices=sorted(PROFILES), default="full")
    run.add_argument(
        "--raw", action="store_true", help="also write per-job records as Parquet (OUT/jobs)"
    )
    run.add_argument(
        "--only",
        metavar="SCENARIOS",
        help="run only these scenarios of the profile, comma-separated (e.g. sandbox,process)",
    )
    common(run, 3)
    gate = add("gate", help="fail when ratios regress against a baseline")
    gate.add_argument(
        "--baseline",
        help="baseline JSON written by --write-baseline (default, for the ci "
        "profile: the committed glidemq/bench/baselines/ci.json)",
    )
    gate.add_argument("--write-baseline", metavar="FILE", help="measure and write a baseline")
    gate.add_argument("--tolerance", type=float, default=0.10, help="allowed drop (0.10)")
    gate.add_argument("--results", help="judge these records instead of running")
    gate.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    common(gate, 3)
    report = add("report", help="markdown report from a results directory")
    report.add_argument("results")
    report.add_argument("--output", help="report directory (default RESULTS/report)")
    report.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    report.add_argument("--plain", action="store_true", help="a plain table, without Spark")
    loadtest.add_arguments(add("locust", help="Locust load test, headless"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "reps", 1) < 1:
        print("glidemq-bench: --reps must be >= 1", file=sys.stderr)
        return 2
    if args.command == "quick":
        return _cmd_run(args, "quick")[0]
    if args.command == "run":
        return _cmd_run(args, args.profile)[0]
    if args.command == "gate":
        return _cmd_gate(args)
    if args.command == "locust":
        return loadtest.run_locust(args)
    return _cmd_report(args)


if __name__ == "__main__":
    raise SystemExit(main())
