"""Freeze one glidemq-run worker process and count the jobs that then ran twice although
they were not running at the freeze.

    .venv/bin/python tools/freeze_run.py                       # 20 runs, the defaults below
    .venv/bin/python tools/freeze_run.py --runs 5 --lock-duration 1000 --jobs 8000

Each run starts an embedded Valkey (or uses --url), adds --jobs jobs of --job-ms ms, starts
`glidemq-run --procs 2 --concurrency 2 glidemq.chaos.app:process` on them (the chaos
processor: every run appends a `started` line with its job id, pid and time to a ledger of
its process before the work, one write(2), and a `processed` line after it), and once a
fifth of the jobs ran, SIGSTOPs one worker process for 2x --lock-duration, then SIGCONTs
it. The other process takes the frozen one's jobs over meanwhile. When every job is done,
a job started twice is:

- `running`: the frozen process had started it before the freeze and not finished it
  (at-least-once: it may run again); also the one start the freeze may have cut in two
  (its lease checked before, its line written as the first thing after it), counted apart
  as `cut` too;
- `finished`: the frozen process had finished it before the freeze, its completion had not
  left (at-least-once too);
- `after`: the frozen process started it only after the freeze, and it ran elsewhere too:
  a job that was not running at the freeze ran twice. Must be 0.

Prints one line per run and a total; exit code 1 when any run had an `after` job.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from glidemq import Queue
from glidemq.chaos.app import DIR_ENV
from glidemq.server.valkey import EmbeddedValkey


def _ledger(directory: Path) -> dict[int, list[dict[str, Any]]]:
    """The execution lines of every worker process, by pid."""
    out: dict[int, list[dict[str, Any]]] = {}
    for path in directory.glob("exec-*.jsonl"):
        lines = []
        for raw in path.read_bytes().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                lines.append(orjson.loads(raw))
        out[int(path.stem.split("-")[1])] = lines
    return out


def _starts(directory: Path) -> int:
    return sum(1 for lines in _ledger(directory).values() for x in lines if x["event"] == "started")


def classify(
    ledger: dict[int, list[dict[str, Any]]], victim: int, stopped: float
) -> dict[str, list[str]]:
    """The jobs started twice, sorted into `running`, `finished` and `after` (see the module
    doc); also `other`: a job the frozen process never started that the other process
    started twice (none is expected)."""
    starts: dict[str, dict[int, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    ends: dict[tuple[int, str], list[float]] = collections.defaultdict(list)
    for pid, lines in ledger.items():
        for line in lines:
            if line["event"] == "started":
                starts[line["job_id"]][pid].append(line["ts"])
            elif line["event"] == "processed":
                ends[(pid, line["job_id"])].append(line["ts"])
    # The one step the freeze cut in two may have been a start: checked before the freeze,
    # its line written right after it, first of all the frozen process wrote then.
    later = sorted((x["ts"], x["event"], x["job_id"]) for x in ledger.get(victim, ()))
    later = [x for x in later if x[0] >= stopped]
    cut = later[0][2] if later and later[0][1] == "started" else None
    out: dict[str, list[str]] = {k: [] for k in ("running", "cut", "finished", "after", "other")}
    for job_id, by_pid in starts.items():
        if sum(len(v) for v in by_pid.values()) < 2:
            continue
        before = [t for t in by_pid.get(victim, []) if t < stopped]
        if job_id == cut:
            out["running"].append(job_id)
            out["cut"].append(job_id)
        elif before:  # the frozen process had started it: it may run again, anywhere
            done = [t for t in ends.get((victim, job_id), []) if t >= before[0]]
            out["running" if not done or min(done) >= stopped else "finished"].append(job_id)
        elif victim in by_pid:
            out["after"].append(job_id)
        else:
            out["other"].append(job_id)
    return out


def _start_fleet(argv: list[str], env: dict[str, str], log_path: Path) -> Any:
    with open(log_path, "wb") as log:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=log)


async def one_run(url: str, args: argparse.Namespace, rnd: random.Random) -> dict[str, Any]:
    name = f"freeze-{uuid.uuid4().hex[:8]}"
    lock = args.lock_duration
    with tempfile.TemporaryDirectory(prefix="glidemq-freeze-") as tmp:
        directory = Path(tmp)
        async with Queue(name, connection=url) as queue:
            await queue.add_bulk([("j", {"ms": args.job_ms}, None)] * args.jobs)
            env = {k: v for k, v in os.environ.items() if not k.startswith("GLIDEMQ_")}
            env.update({DIR_ENV: tmp, "PYTHONUNBUFFERED": "1"})
            argv = [
                sys.executable, "-m", "glidemq.runtime.cli", "glidemq.chaos.app:process",
                "--queue", name, "--url", url, "--procs", "2", "--concurrency", "2",
                "--lock-duration", str(lock), "--stalled-interval", str(args.stalled_interval),
                "--heartbeat-timeout", "120", "--status-interval", "0",
            ]  # fmt: skip
            fleet = _start_fleet(argv, env, directory / "fleet.log")
            try:
                deadline = time.monotonic() + 120
                while _starts(directory) < args.jobs // 5 or len(_ledger(directory)) < 2:
                    if time.monotonic() > deadline or fleet.poll() is not None:
                        log_text = (directory / "fleet.log").read_text(errors="replace")
                        raise RuntimeError(f"the fleet did not get going:\n{log_text[-2000:]}")
                    await asyncio.sleep(0.01)
                victim = rnd.choice(sorted(_ledger(directory)))
                stopped = time.time()
                os.kill(victim, signal.SIGSTOP)
                try:
                    await asyncio.sleep(2 * lock / 1000)  # the fault itself: 2x the lock
                finally:
                    os.kill(victim, signal.SIGCONT)
                resumed = time.time()
                deadline = time.monotonic() + 300
                while True:
                    counts = await queue.get_job_counts()
                    if counts.completed + counts.failed >= args.jobs:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"jobs left after 300 s: {counts}")
                    await asyncio.sleep(0.1)
            finally:
                fleet.send_signal(signal.SIGTERM)
                try:
                    fleet.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    fleet.kill()
                    fleet.wait()
            await queue.obliterate(force=True)
        ledger = _ledger(directory)
        found = classify(ledger, victim, stopped)
        if args.verbose:
            for job_id in (found["after"] + found["other"])[:5]:
                for pid, lines in sorted(ledger.items()):
                    who = "frozen" if pid == victim else "other"
                    for x in lines:
                        if x["job_id"] == job_id:
                            print(f"  {job_id} {who} {x['event']} {x['ts'] - stopped:+.4f} s")
    return {
        "freeze_s": round(resumed - stopped, 3),
        "failed": counts.failed,
        **{k: len(v) for k, v in found.items()},
        "after_ids": found["after"][:10],
        "other_ids": found["other"][:10],
    }


async def main(args: argparse.Namespace) -> int:
    rnd = random.Random(args.seed)
    server = None
    url = args.url
    if url is None:
        server = EmbeddedValkey().start()
        url = server.url
    bad = 0
    totals: collections.Counter[str] = collections.Counter()
    try:
        for i in range(1, args.runs + 1):
            r = await one_run(url, args, rnd)
            totals.update({k: r[k] for k in ("running", "cut", "finished", "after", "other")})
            bad += bool(r["after"])
            print(
                f"run {i}: frozen {r['freeze_s']} s; run twice: running at the freeze "
                f"{r['running']} (cut by it {r['cut']}), finished before it {r['finished']}, "
                f"started after it "
                f"{r['after']} {r['after_ids'] or ''}, other {r['other']} {r['other_ids'] or ''}; "
                f"failed {r['failed']}",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()
    print(
        f"{args.runs} runs: jobs run twice that were running at the freeze {totals['running']} "
        f"(cut by it {totals['cut']}), "
        f"finished before it {totals['finished']}, started after it {totals['after']} "
        f"(in {bad} runs), other {totals['other']}"
    )
    return 1 if bad else 0


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--jobs", type=int, default=8000)
    p.add_argument("--job-ms", type=float, default=2.0)
    p.add_argument("--lock-duration", type=int, default=1000, metavar="MS")
    p.add_argument("--stalled-interval", type=int, default=200, metavar="MS")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--verbose", action="store_true", help="show the ledger of odd jobs")
    p.add_argument("--url", default=None, help="use this Valkey instead of an embedded one")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(_parse())))
