"""Cold start of a serverless producer: a fresh Python process imports glidemq and adds one
job through `glidemq.Producer` to a local Valkey.

    python benchmarks/cold_start.py [--runs 15] [--url valkey://127.0.0.1:6379]

Without --url it starts the embedded Valkey. Prints, over the runs, the median, min and max
of: the import of glidemq (and of that, the valkey-glide client alone), the first add
(connect, library check, add), a second add on the same connection, an add in a second
`asyncio.run` (a new event loop: a new connection, as in a serverless function that calls
`asyncio.run` per invocation), and the whole process
(interpreter start to exit) as its parent saw it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = """
import time
t0 = time.perf_counter()
import asyncio
import glide
tg = time.perf_counter()
from glidemq import Producer
t1 = time.perf_counter()
producer = Producer("cold-start")
async def main():
    a = time.perf_counter()
    await producer.add("ping", {"n": 1})
    b = time.perf_counter()
    await producer.add("ping", {"n": 2})
    return b - a, time.perf_counter() - b
async def next_invocation():
    a = time.perf_counter()
    await producer.add("ping", {"n": 3})
    return time.perf_counter() - a
first, second = asyncio.run(main())
next_loop = asyncio.run(next_invocation())
asyncio.run(producer.close())
import json
figures = {"import": t1 - t0, "import_glide": tg - t0, "first_add": first, "second_add": second,
           "next_loop_add": next_loop}
print(json.dumps(figures))
"""


def _run_once(url: str) -> dict[str, float]:
    env = {**os.environ, "GLIDEMQ_URL": url}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - started
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    figures["process"] = wall
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--url", help="a running server (default: start the embedded Valkey)")
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        from glidemq.server.valkey import EmbeddedValkey

        server = EmbeddedValkey().start()
        url = server.url
    try:
        _run_once(url)  # warm the OS page cache; not counted
        runs = [_run_once(url) for _ in range(args.runs)]
    finally:
        if server is not None:
            server.stop()
    report = {}
    for key in ("import", "import_glide", "first_add", "second_add", "next_loop_add", "process"):
        values = [r[key] * 1000 for r in runs]
        report[key] = {
            "median_ms": round(statistics.median(values), 2),
            "min_ms": round(min(values), 2),
            "max_ms": round(max(values), 2),
        }
    print(json.dumps({"runs": args.runs, "python": sys.version.split()[0], **report}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
