"""What the AI-native primitives cost: jobs that call `report_usage` once and `stream` ten
times, against no-op jobs, one worker at concurrency 50 on an embedded Valkey; and how long
`get_usage_summary` takes over a week of full per-minute buckets.

Run: .venv/bin/python benchmarks/ai_primitives.py [jobs] [rounds]
Numbers from one machine drift; compare the two kinds within one run (they alternate).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from glidemq import Job, Queue, Worker
from glidemq.options.usage import USAGE_MINUTES
from glidemq.server.valkey import EmbeddedValkey


async def noop(job: Job[Any, Any]) -> None:
    return None


async def ai(job: Job[Any, Any]) -> None:
    for i in range(10):
        await job.stream(f"tok{i}")
    await job.report_usage(model="m", tokens={"input": 10, "output": 10}, costs={"total": 0.01})


async def run(url: str, name: str, processor: Any, n: int) -> float:
    async with Queue(name, connection=url) as q:
        await q.add_bulk([("j", i) for i in range(n)])
        start = time.perf_counter()
        async with Worker(name, processor, connection=url, concurrency=50) as w:
            done = asyncio.Event()
            count = 0

            def on_completed(*_: Any) -> None:
                nonlocal count
                count += 1
                if count == n:
                    done.set()

            w.events.on("completed", on_completed)
            await asyncio.wait_for(done.wait(), timeout=600)
        elapsed = time.perf_counter() - start
        await q.obliterate(force=True)
    return n / elapsed


async def summary_latency(url: str) -> tuple[float, float]:
    """get_usage_summary over a week of buckets, each with 5 models: median and max ms."""
    async with Queue("summary", connection=url) as q:
        ctx = await q._context()
        now_min = int(time.time() * 1000) // 60_000
        index = q.keys.base + "usage"
        for start in range(0, USAGE_MINUTES, 500):
            minutes = range(now_min - start - 499, now_min - start + 1)
            for m in minutes:
                fields = {"calls": "200", "tokens": "40000", "cost": "1.5", "tok|input": "20000"}
                for k in range(5):
                    fields |= {f"mcalls|m{k}": "40", f"mtok|m{k}": "8000", f"mcost|m{k}": "0.3"}
                await ctx.client.hset(f"{index}:{m}", fields)
            await ctx.client.zadd(index, {str(m): float(m) for m in minutes})
        times = []
        for _ in range(7):
            t = time.perf_counter()
            s = await q.get_usage_summary()
            times.append((time.perf_counter() - t) * 1000)
        assert s.total.calls >= 200 * USAGE_MINUTES
        await q.obliterate(force=True)
    return statistics.median(times), max(times)


async def main(n: int, rounds: int) -> None:
    with EmbeddedValkey() as server:
        rates: dict[str, list[float]] = {"noop": [], "ai": []}
        for r in range(rounds):
            for kind, proc in (("noop", noop), ("ai", ai)):
                rates[kind].append(await run(server.url, f"{kind}{r}", proc, n))
        for kind, values in rates.items():
            print(
                f"{kind:5s} jobs/s: median {statistics.median(values):,.0f} "
                f"(runs: {', '.join(f'{v:,.0f}' for v in values)})"
            )
        ratio = statistics.median(rates["ai"]) / statistics.median(rates["noop"])
        print(f"ai / noop: {ratio:.2f}")
        med, worst = await summary_latency(server.url)
        print(
            f"get_usage_summary over {USAGE_MINUTES} full buckets: median {med:.1f} ms, "
            f"max {worst:.1f} ms"
        )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 2000, args[1] if len(args) > 1 else 3))
