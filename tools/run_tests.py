"""Run the test suite as concurrent pytest processes; an empty collection is a failure.

    python tools/run_tests.py                       # the whole suite, in SHARDS, concurrently
    python tools/run_tests.py tests/unit tests/docs # those paths, split over the processes
    python tools/run_tests.py tests/unit -k keys     # one path: one plain pytest process
    GLIDEMQ_TEST_JOBS=1 python tools/run_tests.py   # everything in one process (serial)

Most of the suite's wall clock is waiting (subprocesses starting, fleets draining, Spark
starting, lock durations passing), not CPU, so two pytest processes on two cores finish in
a little over half the time of one. Each process starts its own embedded servers on free
ports and keeps its own pytest cache; their output is streamed line by line, each line
prefixed with its process's name, and a summary says which failed. The run exits non-zero
when any process failed. docs/TESTING.md has the split and its measurements.

pytest exits 5 when it collected no tests. For this project that always means something is
broken (a bad path, a filter that matches nothing), so it must not read as success: a
process that collects nothing fails the run, unless a -k/-m filter was given and another
process did collect tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NO_TESTS_COLLECTED = 5
ROOT = Path(__file__).resolve().parents[1]

# The default split of tests/, by measured serial cost (docs/TESTING.md): the subprocess-
# and fleet-heavy tools on one side, the engine's own tests on the other. Every directory
# of tests/ must be in exactly one shard (tests/unit/test_run_tests.py checks it), so
# nothing is left out of CI.
SHARDS: dict[str, tuple[str, ...]] = {
    "tools": (
        "tests/chaos",
        "tests/bench",
        "tests/cli",
        "tests/dashboard",
        "tests/proxy",
        "tests/sim",
    ),
    "engine": (
        "tests/integration",
        "tests/behaviour",
        "tests/spark",
        "tests/sandbox",
        "tests/unit",
        "tests/docs",
    ),
}

# Rough serial minutes of each directory, to balance paths given on the command line.
WEIGHTS: dict[str, float] = {
    "tests/chaos": 6.0,
    "tests/integration": 6.0,
    "tests/bench": 4.0,
    "tests/spark": 3.0,
    "tests/cli": 3.0,
    "tests/sandbox": 1.5,
    "tests/dashboard": 1.0,
    "tests/behaviour": 1.0,
    "tests/proxy": 2.0,
    "tests/unit": 0.5,
    "tests/docs": 4.0,
    "tests/sim": 4.5,  # 1-2 min alone, 4.5 min with the machine loaded (2026-12-07)
}

# pytest options whose value is the next argument (so that value is not a path).
_TAKES_VALUE = frozenset(
    (
        "-k", "-m", "-p", "-c", "-o", "-W", "-r", "--deselect", "--ignore", "--ignore-glob",
        "--rootdir", "--basetemp", "--junitxml", "--junit-xml", "--durations", "--timeout",
        "--maxfail", "--tb", "--log-level", "--confcutdir", "--import-mode",
    )
)  # fmt: skip
_FILTERS = frozenset(("-k", "-m", "--deselect", "--lf", "--last-failed"))


@dataclass
class Shard:
    """One pytest process: its name, the paths it runs, and how it ended."""

    name: str
    paths: list[str]
    code: int | None = None
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(paths, options): the arguments naming test files or directories, and the rest."""
    paths: list[str] = []
    options: list[str] = []
    takes_value = False
    for arg in args:
        if takes_value:
            options.append(arg)
            takes_value = False
        elif arg.startswith("-"):
            options.append(arg)
            takes_value = arg in _TAKES_VALUE
        elif (ROOT / arg.split("::", 1)[0]).exists() or Path(arg.split("::", 1)[0]).exists():
            paths.append(arg)
        else:
            options.append(arg)
    return paths, options


def _weight(path: str) -> float:
    key = path.split("::", 1)[0].rstrip("/")
    if key in WEIGHTS:
        return WEIGHTS[key]
    parent = next((d for d in WEIGHTS if key.startswith(d + "/")), None)
    return WEIGHTS[parent] / 10 if parent else 0.5


def plan(args: Sequence[str], jobs: int) -> tuple[list[Shard], list[str]]:
    """The processes to start and the options each gets: the default SHARDS when no path is
    given, else the paths spread over at most `jobs` processes, heaviest first."""
    paths, options = split_args(args)
    if not paths:
        if jobs <= 1:
            return [Shard("all", [])], options
        return [Shard(name, list(dirs)) for name, dirs in SHARDS.items()], options
    count = max(1, min(jobs, len(paths)))
    if count == 1:
        return [Shard("all", paths)], options
    shards = [Shard(f"p{i + 1}", []) for i in range(count)]
    load = [0.0] * count
    for path in sorted(paths, key=_weight, reverse=True):
        i = load.index(min(load))
        shards[i].paths.append(path)
        load[i] += _weight(path)
    for shard in shards:  # keep the command line's order within a process
        shard.paths.sort(key=paths.index)
    return shards, options


def _pump(shard: Shard, prefix: str, lock: threading.Lock, started: float) -> None:
    assert shard.proc is not None and shard.proc.stdout is not None
    for raw in shard.proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith(("FAILED ", "ERROR ")):  # pytest's short summary of a failure
            shard.failures.append(line)
        with lock:
            sys.stdout.write(f"{prefix}{line}\n")
            sys.stdout.flush()
    shard.code = shard.proc.wait()
    shard.seconds = time.monotonic() - started


def run(shards: list[Shard], options: list[str]) -> None:
    """Start every shard, stream their output, and wait for all of them."""
    if len(shards) == 1:  # a plain pytest run: its own terminal output, unprefixed
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", *shards[0].paths, *options]
        shards[0].code = subprocess.call(cmd, cwd=ROOT)
        shards[0].seconds = time.monotonic() - started
        return
    width = max(len(s.name) for s in shards)
    lock = threading.Lock()
    pumps = []
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for shard in shards:
        # its own cache, so --lf/--ff of one process never reads another's results
        cache = (
            [] if "no:cacheprovider" in options else ["-o", f"cache_dir=.pytest_cache/{shard.name}"]
        )
        # the slowest tests of each process, so a shard drifting past its budget shows why
        slowest = [] if any(o.startswith("--durations") for o in options) else ["--durations=15"]
        cmd = [
            sys.executable, "-m", "pytest", "--color=no", *cache, *slowest, *shard.paths, *options
        ]  # fmt: skip
        print(f"run_tests: [{shard.name}] {' '.join(shard.paths)}", flush=True)
        shard.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        pump = threading.Thread(
            target=_pump, args=(shard, f"[{shard.name:<{width}}] ", lock, started), daemon=True
        )
        pump.start()
        pumps.append(pump)
    try:
        for pump in pumps:
            pump.join()
    except KeyboardInterrupt:
        for shard in shards:
            if shard.proc is not None and shard.proc.poll() is None:
                shard.proc.terminate()
        for shard in shards:
            if shard.proc is not None:
                shard.code = shard.proc.wait()
        raise


def verdict(shards: Sequence[Shard], options: Sequence[str]) -> int:
    """The run's exit code: 0 only when every process passed and tests were collected."""
    filtered = any(o in _FILTERS or o.startswith(("-k", "-m")) for o in options)
    empty = [s for s in shards if s.code == NO_TESTS_COLLECTED]
    failed = [s for s in shards if s.code not in (0, NO_TESTS_COLLECTED)]
    if empty and (not filtered or len(empty) == len(shards)):
        names = ", ".join(f"[{s.name}] {' '.join(s.paths) or 'tests'}" for s in empty)
        print(
            f"run_tests: pytest collected no tests (exit 5) in {names}. The suite is never "
            "empty, so this is a failure: check the paths or -k/-m filters passed.",
            file=sys.stderr,
        )
        return 1
    if failed:
        return next((s.code for s in failed if s.code == 1), failed[0].code) or 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    jobs = int(os.environ.get("GLIDEMQ_TEST_JOBS", "2"))
    shards, options = plan(args, jobs)
    run(shards, options)
    if len(shards) > 1:
        print("run_tests: summary", flush=True)
        for s in shards:
            state = {0: "passed", NO_TESTS_COLLECTED: "collected no tests"}.get(
                s.code or 0, f"FAILED (exit {s.code})"
            )
            print(f"  [{s.name}] {state} in {s.seconds:.0f} s: {' '.join(s.paths)}", flush=True)
        # the failures again, last: a log read from its tail still names them
        for s in shards:
            for line in s.failures[:20]:
                print(f"  [{s.name}] {line[:300]}", flush=True)
    return verdict(shards, options)


if __name__ == "__main__":
    raise SystemExit(main())
