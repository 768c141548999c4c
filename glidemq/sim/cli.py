"""`python -m glidemq.sim`: run seeds, print what broke, replay and shrink one seed.

    python -m glidemq.sim run --seeds 0-999 [--faults all|crash,freeze,...] [--procs N]
    python -m glidemq.sim run --seed 42 --trace | --digest | --shrink
    python -m glidemq.sim run --seeds 0-199 --app mymodule:process
    python -m glidemq.sim invariants

A run over seeds prints one line per failing seed (seed, invariant, job, what was seen) and
ends with `N seeds, M violations` (M: the seeds with a violation that is not a known defect);
it exits 1 when M > 0 (with `--strict`, known defects count too).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..cli.support import Parser
from ..processor import load_processor
from .behaviour import UserProcessor
from .checker import INVARIANTS
from .facts import Violation
from .plan import make_plan, parse_faults
from .runner import run_plan
from .shrink import reproducer, shrink

__all__ = ["SeedSummary", "main", "parse_seeds", "run_many"]

_APP: UserProcessor | None = None  # the --app processor, loaded once per process


@dataclass(frozen=True, slots=True)
class SeedSummary:
    """What a pool process sends back for one seed."""

    seed: int
    violations: tuple[Violation, ...]
    digest: str
    seconds: float
    jobs: int
    faults: int

    @property
    def failures(self) -> list[Violation]:
        return [v for v in self.violations if not v.known]


def parse_seeds(text: str) -> list[int]:
    """`7`, `0-999` or `1,5,9-12`."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if dash:
            seeds.extend(range(int(lo), int(hi) + 1))
        elif lo:
            seeds.append(int(lo))
    return seeds


def _load_app(target: str | None) -> UserProcessor | None:
    if target is None:
        return None
    return load_processor(target).function


def _init(app: str | None) -> None:
    global _APP
    _APP = _load_app(app)


def _one(job: tuple[int, str]) -> SeedSummary:
    seed, faults = job
    began = time.perf_counter()
    result = run_plan(make_plan(seed, faults), _APP)
    return SeedSummary(
        seed,
        tuple(result.violations),
        result.digest(),
        time.perf_counter() - began,
        result.jobs,
        result.faults,
    )


def run_many(
    seeds: Sequence[int], faults: str = "all", procs: int | None = None, app: str | None = None
) -> Iterator[SeedSummary]:
    """Run `seeds` on `procs` processes (default: every core), in seed order. The pool
    forks, so a patch applied in this process (tests/sim) applies in the pool too."""
    jobs = [(s, faults) for s in seeds]
    n = procs or os.cpu_count() or 1
    if n <= 1 or len(jobs) <= 1:
        _init(app)
        yield from map(_one, jobs)
        return
    ctx = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    )
    with ctx.Pool(n, initializer=_init, initargs=(app,)) as pool:
        yield from pool.imap(_one, jobs, chunksize=1)


def _line(s: SeedSummary) -> str:
    first = s.failures[0] if s.failures else s.violations[0]
    more = len(s.violations) - 1
    return first.line(s.seed) + (f" (+{more} more)" if more else "")


def _run_seeds(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds)
    began = time.perf_counter()
    failing = known = 0
    for s in run_many(seeds, args.faults, args.procs, args.app):
        if s.failures or (args.strict and s.violations):
            failing += 1
            print(_line(s), flush=True)
        elif s.violations:
            known += 1
            if args.show_known:
                print(_line(s), flush=True)
    took = time.perf_counter() - began
    rate = len(seeds) / took * 60 if took > 0 else 0.0
    print(
        f"{known} seeds broke only known defects (glidemq.sim.known); {took:.1f} s, "
        f"{rate:.0f} seeds/min",
        file=sys.stderr,
    )
    print(f"{len(seeds)} seeds, {failing} violations")
    return 1 if failing else 0


def _run_seed(args: argparse.Namespace) -> int:
    app = _load_app(args.app)
    result = run_plan(make_plan(args.seed, args.faults), app)
    if args.trace:
        for line in result.history.lines():
            print(line)
    if args.digest:
        print(result.digest())
    for v in result.violations:
        print(v.line(args.seed))
    bad = result.violations if args.strict else result.failures
    if args.shrink and result.violations:
        invariant = (bad or result.violations)[0].invariant
        small = shrink(result.plan, invariant, app, progress=lambda m: print(m, file=sys.stderr))
        again = run_plan(small, app)
        print(
            f"# shrunk to {len(small.jobs)} jobs, {len(small.actions)} actions, "
            f"{len(small.faults)} faults; {invariant} still fails:"
        )
        print(reproducer(again, invariant))
    if not args.trace and not args.digest:
        print(f"1 seeds, {1 if bad else 0} violations")
    return 1 if bad else 0


def build_parser() -> Parser:
    p = Parser(prog="python -m glidemq.sim", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run seeds and check the invariants")
    which = run.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", help="seeds to run: 0-999, or 1,5,9-12")
    which.add_argument("--seed", type=int, help="one seed (with --trace, --digest, --shrink)")
    run.add_argument(
        "--faults",
        default="all",
        type=_faults,
        help="all, none, or a list of crash,freeze,slow,lossy,reset,restart,stall,clock,block",
    )
    run.add_argument("--procs", type=int, default=None, help="processes (default: every core)")
    run.add_argument("--app", help="MODULE:ATTR: run your processor instead of the seed's")
    run.add_argument("--trace", action="store_true", help="print the seed's history")
    run.add_argument("--digest", action="store_true", help="print the history's digest")
    run.add_argument("--shrink", action="store_true", help="shrink a failing seed to a test")
    run.add_argument("--strict", action="store_true", help="known defects fail the run too")
    run.add_argument("--show-known", action="store_true", help="print seeds of known defects")
    sub.add_parser("invariants", help="list the invariants")
    return p


def _faults(text: str) -> str:
    try:
        parse_faults(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "invariants":
        for name, (text, _) in INVARIANTS.items():
            print(f"{name}: {text}")
        return 0
    if args.seed is not None:
        return _run_seed(args)
    return _run_seeds(args)
