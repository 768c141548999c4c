"""`glidemq-bench locust`: the Locust load test (`benchmarks/locustfile.py`), headless.

The Locust file is a development tool: it lives in the source checkout, not in the wheel,
and Locust itself comes with the `dev` extra. Without either, the command says so and exits 2.

Starts an embedded Valkey (or uses `--url`), one `glidemq-run` worker process on the queue
(so `add_and_wait` gets its results), runs Locust headless for `--seconds` with `--users`
users, prints Locust's summary (one row per request name: add, add_and_wait) and stops
everything. `--csv PREFIX` keeps Locust's CSV statistics.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..server.valkey import EmbeddedValkey

__all__ = ["LOCUSTFILE", "add_arguments", "locust_missing", "run_locust"]

# glidemq/bench/loadtest.py -> the checkout's benchmarks/locustfile.py
LOCUSTFILE = Path(__file__).resolve().parents[2] / "benchmarks" / "locustfile.py"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `locust` subcommand's flags."""
    p.add_argument("--users", type=int, default=20, help="concurrent users (default 20)")
    p.add_argument("--spawn-rate", type=float, default=10.0, help="users started per second")
    p.add_argument("--seconds", type=int, default=20, help="run time (default 20)")
    p.add_argument("--url", help="an existing server (default: an embedded Valkey)")
    p.add_argument("--queue", default="locust", help="queue name (default locust)")
    p.add_argument("--concurrency", type=int, default=50, help="the worker's concurrency")
    p.add_argument("--no-worker", action="store_true", help="start no worker process")
    p.add_argument("--csv", metavar="PREFIX", help="write Locust's CSV statistics")


def _worker(url: str, queue: str, concurrency: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "glidemq.runtime.cli", "glidemq.bench.scenario:noop_job",
            "--queue", queue, "--url", url, "--procs", "1", "--concurrency", str(concurrency),
            "--log-level", "WARNING",
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


def _locust(args: argparse.Namespace, url: str) -> int:
    cmd = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(args.users), "-r", str(args.spawn_rate), "-t", f"{args.seconds}s",
        "--stop-timeout", "10", "--only-summary",
    ]  # fmt: skip
    if args.csv:
        cmd += ["--csv", args.csv]
    env = {**os.environ, "GLIDEMQ_URL": url, "GLIDEMQ_LOCUST_QUEUE": args.queue}
    return subprocess.run(cmd, env=env, check=False).returncode


def locust_missing(locustfile: Path = LOCUSTFILE) -> str | None:
    """Why the load test cannot run here (no source checkout, no Locust), or None."""
    if not locustfile.is_file():
        return (
            f"{locustfile} not found: the Locust load test runs from a source checkout of "
            "glidemq (it is not part of the installed package)"
        )
    if importlib.util.find_spec("locust") is None:
        return "Locust is not installed: pip install 'glidemq[dev]' (or pip install locust)"
    return None


def run_locust(args: argparse.Namespace) -> int:
    """Run the load test; Locust's exit code (1 when a request failed), 2 when it cannot run."""
    if (why := locust_missing()) is not None:
        print(f"glidemq-bench locust: {why}", file=sys.stderr)
        return 2
    server = None if args.url else EmbeddedValkey().start()
    url = args.url or (server.url if server is not None else "")
    worker = None if args.no_worker else _worker(url, args.queue, args.concurrency)
    print(
        f"glidemq-bench locust: {args.users} users for {args.seconds} s against {url}, "
        f"queue {args.queue!r}" + ("" if worker else " (no worker)"),
        file=sys.stderr,
    )
    try:
        return _locust(args, url)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        if server is not None:
            server.stop()
