"""`glidemq-chaos`: run a chaos scenario (or `all`) and print one JSON result on stdout.

Exit codes: 0 nothing lost and every invariant held; 1 a job was lost or an invariant broke;
2 bad usage, or the run could not be set up (no server, the fleet did not start).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from ..cli.argtypes import non_negative_float, non_negative_int, positive_int
from .registry import load_problems, missing, scenarios
from .result import machine
from .scenario import Scenario

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_EXAMPLES = """examples:
  glidemq-chaos kill-workers                      # 5000 jobs, embedded Valkey, random seed
  glidemq-chaos hang-worker --jobs 500 --seed 7   # replay a run with its seed
  glidemq-chaos server-restart --json-out r.json
  glidemq-chaos backlog --url valkey://10.0.0.5:6379
  glidemq-chaos all --jobs 2000 --json-out all.json

The result (one JSON object) goes to stdout, progress to stderr. See docs/CHAOS.md."""


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every scenario takes; unset ones fall back to the scenario's defaults."""
    p.add_argument("--jobs", type=positive_int, default=5000, help="jobs to run (default 5000)")
    p.add_argument("--seed", type=int, help="seed of the fault schedule (default: random)")
    p.add_argument("--url", help="use this Valkey instead of starting an embedded one")
    p.add_argument("--procs", type=positive_int, help="glidemq-run worker processes")
    p.add_argument("--concurrency", type=positive_int, help="jobs at once per process")
    p.add_argument(
        "--job-ms", dest="job_ms", type=non_negative_float, help="processor time per job"
    )
    p.add_argument("--faults", type=int, help="how many faults to inject")
    p.add_argument("--rate", type=non_negative_float, help="producer jobs/s (0: as fast as it can)")
    p.add_argument("--attempts", type=positive_int, help="attempts per job")
    p.add_argument(
        "--lock-duration",
        dest="lock_duration_ms",
        type=positive_int,
        metavar="MS",
        help="glidemq-run --lock-duration",
    )
    p.add_argument(
        "--stalled-interval",
        dest="stalled_interval_ms",
        type=positive_int,
        metavar="MS",
        help="glidemq-run --stalled-interval",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=non_negative_float,
        metavar="SECONDS",
        help="glidemq-run --heartbeat-timeout",
    )
    p.add_argument(
        "--drain-timeout",
        type=non_negative_float,
        default=120.0,
        metavar="SECONDS",
        help="after the faults, how long every job gets to finish (default 120)",
    )
    p.add_argument(
        "--settle",
        type=non_negative_float,
        default=30.0,
        metavar="SECONDS",
        help="the drain also ends when no job finished for this long; what is left then is "
        "stuck or lost (default 30)",
    )
    p.add_argument(
        "--timeout",
        type=non_negative_float,
        default=600.0,
        metavar="SECONDS",
        help="longest time for producing and injecting the faults (default 600)",
    )
    p.add_argument(
        "--durability",
        choices=("replicated", "fsync", "none"),
        help="run the producer and the fleet with this durability (docs/DURABILITY.md); "
        "then a completion the workers were told of must never run again",
    )
    p.add_argument(
        "--durability-timeout",
        type=positive_int,
        metavar="MS",
        help="how long a write waits for its confirmation (default 1000)",
    )
    p.add_argument("--json-out", metavar="FILE", help="also write the result to FILE")
    p.add_argument(
        "--ledger-out",
        metavar="FILE",
        help="write the run's ledger (JSON Lines, for glidemq.spark) to FILE",
    )
    p.add_argument(
        "--workdir",
        metavar="DIR",
        help="keep logs, ledgers and the verdict under DIR, one new directory per run "
        "(default: a temp dir, removed unless the run failed); DIR must be empty or new",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="allow a --workdir that holds earlier runs (this run still gets a new directory)",
    )
    p.add_argument(
        "--max-reexecutions",
        type=non_negative_int,
        metavar="N",
        help="fail above N re-executions (default: the bound the scenario derives from the "
        "faults it injected)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def build_parser() -> argparse.ArgumentParser:
    """The glidemq-chaos parser: one subcommand per registered scenario, plus `all`."""
    from ..version import __version__

    p = argparse.ArgumentParser(
        prog="glidemq-chaos",
        description="Hurt a glidemq deployment on purpose and check that no job is lost.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # no prefix matching of flags, here nor in the subcommands
    )
    p.add_argument("--version", action="version", version=f"glidemq-chaos {__version__}")
    sub = p.add_subparsers(dest="scenario", metavar="SCENARIO", required=True)
    for name, cls in scenarios().items():
        sp = sub.add_parser(name, help=cls.summary, description=cls.summary, allow_abbrev=False)
        add_common_arguments(sp)
        cls().add_arguments(sp)
    ap = sub.add_parser(
        "all",
        help="every scenario in turn (one JSON object with all results)",
        allow_abbrev=False,
    )
    add_common_arguments(ap)
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="SCENARIO",
        help="leave this scenario out (repeatable)",
    )
    return p


def _scenario_args(name: str, argv: Sequence[str]) -> argparse.Namespace:
    """Parse `all`'s common flags as scenario `name`'s, so its own flags get defaults."""
    return build_parser().parse_args([name, *argv])


async def _run_one(scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    from .lifecycle import run_scenario

    reason = scenario.unavailable(args)
    if reason is not None:
        return {"scenario": scenario.name, "ok": True, "skipped": reason}
    try:
        return await run_scenario(scenario, args)
    except Exception as exc:
        # A run that could not be set up says so in its result; the others go on.
        return {
            "scenario": scenario.name,
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }


async def _run_all(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    # drop `--skip X` pairs: they belong to `all` only
    cleaned: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--skip":
            next(it, None)
        elif a.startswith("--skip="):
            continue
        else:
            cleaned.append(a)
    results, skipped = [], []
    started = time.time()
    for name, cls in scenarios().items():
        if not cls.in_all:
            continue
        if name in args.skip:
            skipped.append({"scenario": name, "reason": "left out with --skip"})
            continue
        scenario_args = _scenario_args(name, cleaned)
        if scenario_args.ledger_out:  # one ledger file per scenario
            out = Path(scenario_args.ledger_out)
            scenario_args.ledger_out = str(out.with_name(f"{out.stem}-{name}{out.suffix}"))
        result = await _run_one(cls(), scenario_args)
        if "skipped" in result:
            skipped.append({"scenario": name, "reason": result["skipped"]})
        else:
            results.append(result)
    for name, reason in missing().items():
        skipped.append({"scenario": name, "reason": reason})
    return {
        "scenario": "all",
        "ok": all(r.get("ok") for r in results),
        "seed": args.seed,
        "runs": results,
        "skipped": skipped,
        "lost": sum(int(r.get("lost", 0)) for r in results),
        "duration_s": round(time.time() - started, 3),
        "machine": machine(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of glidemq-chaos; returns the exit code."""
    raw = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="glidemq-chaos: %(levelname)s %(message)s")
    for module, problem in load_problems().items():
        print(
            f"glidemq-chaos: warning: cannot load {module}: {problem.splitlines()[0]}",
            file=sys.stderr,
        )
    parser = build_parser()
    args = parser.parse_args(raw)
    refused = _refuse_workdir(args)
    if refused:
        print(f"glidemq-chaos: error: {refused}", file=sys.stderr)
        return EXIT_USAGE
    if args.scenario == "all":
        result = asyncio.run(_run_all(args, raw[1:]))
    else:
        scenario = scenarios()[args.scenario]()
        reason = scenario.unavailable(args)
        if reason is not None:
            print(f"glidemq-chaos: error: {reason}", file=sys.stderr)
            return EXIT_USAGE
        result = asyncio.run(_run_one(scenario, args))
    text = orjson.dumps(result, option=orjson.OPT_SORT_KEYS)
    sys.stdout.write(text.decode() + "\n")
    sys.stdout.flush()
    if args.json_out:
        path = Path(args.json_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    if "error" in result:
        print(f"glidemq-chaos: error: {result['error']}", file=sys.stderr)
        return EXIT_USAGE
    for run in result.get("runs", [result]):
        for problem in run.get("problems", []):
            print(f"glidemq-chaos: FAILED {run.get('scenario')}: {problem}", file=sys.stderr)
    return EXIT_OK if result.get("ok") else EXIT_FAILED


def _refuse_workdir(args: argparse.Namespace) -> str | None:
    """Why `--workdir` cannot be used, or None: a directory holding anything is refused
    unless `--resume` (earlier runs' ledgers must never mix into this one's)."""
    if not args.workdir:
        return None
    path = Path(args.workdir)
    if path.exists() and not path.is_dir():
        return f"--workdir {path} is not a directory"
    if path.is_dir() and any(path.iterdir()) and not args.resume:
        return (
            f"--workdir {path} is not empty (it holds earlier runs); use a new directory, "
            "or --resume to add this run next to them"
        )
    return None


if __name__ == "__main__":
    raise SystemExit(main())
