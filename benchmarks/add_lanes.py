"""Adds from many callers at once: how `Queue.add` shares calls among callers that each
await their add and add again (the `add-concurrent` bench scenario, at several lane counts).

    python benchmarks/add_lanes.py [--url valkey://127.0.0.1:6379] [--lanes 10,50,200,1000]
                                   [--jobs 20000] [--reps 3]

Without --url it starts the embedded Valkey. For each lane count it prints jobs/s (median
and range over the repetitions), this process's CPU per add, and the calls that carried the
adds: how many went out alone (`glidemq_add`), how many were shared (`glidemq_addBulk`), and
the median number of adds in a shared call. The call counts are read by wrapping the
queue's send, not from the server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import glidemq.queue.queue as queue_module
from glidemq import Queue


class _Calls:
    """The calls the queue sends, counted by function, with the adds each shared call held."""

    def __init__(self) -> None:
        self.alone = 0
        self.shared: list[int] = []
        self._real = queue_module.send

    async def send(self, sender: Any, call: Any) -> Any:
        reply = await self._real(sender, call)
        if call.function == "glidemq_add":
            self.alone += 1
        elif call.function == "glidemq_addBulk":
            self.shared.append(len(reply))  # one reply per job
        return reply


async def _run(url: str, lanes: int, jobs: int) -> tuple[float, float, _Calls]:
    calls = _Calls()
    queue_module.send = calls.send  # type: ignore[assignment]
    try:
        async with Queue("bench-add-lanes", connection=url) as q:
            await q.obliterate(force=True)
            counter = iter(range(jobs))

            async def lane() -> None:
                for i in counter:
                    await q.add("noop", {"i": i})

            calls.alone, calls.shared = 0, []
            t0, c0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(lane() for _ in range(lanes)))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            await q.obliterate(force=True)
    finally:
        queue_module.send = calls._real
    return jobs / wall, cpu / jobs * 1e6, calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running Valkey (default: start the embedded one)")
    ap.add_argument("--lanes", default="10,50,200,1000", help="callers at once, comma-separated")
    ap.add_argument("--jobs", type=int, default=20_000, help="adds per run")
    ap.add_argument("--reps", type=int, default=3)
    o = ap.parse_args(argv)
    server = None
    if o.url is None:
        from glidemq.server.valkey import EmbeddedValkey

        server = EmbeddedValkey()
        server.start()
        o.url = server.url
    try:
        print(f"{o.url}, {o.jobs} adds per run, {o.reps} runs per lane count")
        for lanes in (int(x) for x in o.lanes.split(",") if x):
            rows = [asyncio.run(_run(o.url, lanes, o.jobs)) for _ in range(o.reps)]
            rates = [r[0] for r in rows]
            last = rows[-1][2]
            print(
                f"lanes {lanes:5}: {statistics.median(rates):9,.0f} adds/s "
                f"({min(rates):,.0f}-{max(rates):,.0f}), "
                f"{statistics.median(r[1] for r in rows):5.1f} µs CPU per add; last run: "
                f"{last.alone} alone, {len(last.shared)} shared "
                f"(median {statistics.median(last.shared) if last.shared else 0:g} adds each)",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
