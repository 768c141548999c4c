"""The kill storm of held jobs, run N times: how many jobs failed by the stall limit that had
started fewer than max_stalled_count + 1 times (must be 0).

    .venv/bin/python tools/kill_storm.py                  # 3 runs, the settings below
    .venv/bin/python tools/kill_storm.py --runs 5 --jobs 12000

Each run is `glidemq-chaos kill-storm --procs 3 --concurrency 20 --jobs 12000 --job-ms 50
--storm-s 10 --every 0.5 --max-stalled 1 --rate 0`: a real `glidemq-run` fleet (default
hold window) on an embedded Valkey, the jobs added as fast as the producer can, a random
worker process SIGKILLed every 0.5 s for 10 s, the processor's max_stalled_count 1 (a
Worker's default). The chaos processor's ledger says how often each job started; the
scenario counts the jobs failed "stalled more than allowable limit" with fewer than 2
starts. Prints one line per run (kills, jobs failed by the stall limit, those with too few
starts, lost) and exits 1 when any run had one with too few.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def one_run(args: argparse.Namespace, seed: int) -> dict[str, object]:
    chaos = Path(sys.executable).parent / "glidemq-chaos"
    with tempfile.TemporaryDirectory(prefix="glidemq-storm-") as tmp:
        out = Path(tmp) / "result.json"
        argv = [
            str(chaos), "kill-storm", "--procs", str(args.procs),
            "--concurrency", str(args.concurrency), "--jobs", str(args.jobs),
            "--job-ms", str(args.job_ms), "--storm-s", str(args.storm_s), "--every",
            str(args.every), "--max-stalled", str(args.max_stalled), "--seed", str(seed),
            "--rate", "0", "--json-out", str(out), "--quiet",
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if not out.exists():
            raise RuntimeError(f"glidemq-chaos wrote no result:\n{proc.stderr[-3000:]}")
        result = json.loads(out.read_text())
    extra = result.get("extra", {}) if isinstance(result.get("extra"), dict) else {}
    storm = extra.get("storm", result.get("storm", {}))
    return {"exit": proc.returncode, "storm": storm, "result": result}


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--procs", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--jobs", type=int, default=12000)
    p.add_argument("--job-ms", type=float, default=50.0)
    p.add_argument("--storm-s", type=float, default=10.0)
    p.add_argument("--every", type=float, default=0.5)
    p.add_argument("--max-stalled", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    bad = 0
    for i in range(args.runs):
        r = one_run(args, args.seed + i)
        storm = r["storm"]
        assert isinstance(storm, dict)
        res = r["result"]
        assert isinstance(res, dict)
        short = int(storm.get("failed_with_fewer_starts", -1))
        bad += short != 0
        print(
            f"run {i + 1} (seed {args.seed + i}): kills {storm.get('kills')}, failed by the "
            f"stall limit {storm.get('failed_by_stalls')}, of them with fewer than "
            f"{args.max_stalled + 1} starts {short}; lost {res.get('lost')}, "
            f"glidemq-chaos exit {r['exit']}",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
