"""Time the dashboard's pages on a big queue: server time per request, in process (the ASGI
app called through httpx, so the time is the dashboard's own work plus its Valkey calls,
without a network or a browser).

    .venv/bin/python tools/dashboard_timings.py --jobs 1000000

Starts its own embedded Valkey (nothing else runs on it), fills one queue with `--jobs`
waiting jobs by add_bulk plus a few thousand delayed, prioritized, completed and failed ones,
then requests each page `--repeat` times and prints the median and the slowest in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx

from glidemq import Job, Queue, Worker
from glidemq.dashboard import create_app
from glidemq.server.valkey import EmbeddedValkey

QUEUE = "big"


async def fill(url: str, jobs: int) -> None:
    async with Queue(QUEUE, connection=url) as q:
        started = time.perf_counter()
        # A few thousand finished jobs first (a worker runs them), then the big backlog.
        await q.add_bulk([("ok", {"i": i}) for i in range(3000)])
        await q.add_bulk([("bad", {"i": i}, {"attempts": 1}) for i in range(2000)])

        async def proc(job: Job[Any, Any]) -> int:
            if job.name == "bad":
                raise ValueError("no")
            return 1

        async with Worker(QUEUE, proc, connection=url, concurrency=50):
            while True:
                c = await q.get_job_counts()
                if c.completed + c.failed >= 5000:
                    break
                await asyncio.sleep(0.2)
        await q.add_bulk([("later", {"i": i}, {"delay": 3_600_000}) for i in range(2000)])
        await q.add_bulk([("urgent", {"i": i}, {"priority": 1 + i % 5}) for i in range(2000)])
        chunk = 50_000
        for start in range(0, jobs, chunk):
            n = min(chunk, jobs - start)
            await q.add_bulk([("email", {"to": f"user{start + i}@example.com"}) for i in range(n)])
        print(f"filled in {time.perf_counter() - started:.0f} s: {await q.get_job_counts()}")


async def timed(client: httpx.AsyncClient, path: str, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = await client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
    return statistics.median(times), max(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    server = EmbeddedValkey().start()
    try:
        await fill(server.url, args.jobs)
        app = create_app(server.url)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await client.get("/static/dashboard.css")  # connect nothing yet: warm the app
            t0 = time.perf_counter()
            first = await client.get("/")  # connects, loads the library, scans for queues
            assert first.status_code == 200, first.text[:300]
            print(
                f"overview, first request (connect + keyspace scan for queue names): "
                f"{(time.perf_counter() - t0) * 1000:.0f} ms"
            )
            app.state.dashboard.forget_names()
            t0 = time.perf_counter()
            await app.state.dashboard.queue_names()
            print(
                f"keyspace scan for queue names alone: {(time.perf_counter() - t0) * 1000:.0f} ms"
            )
            waiting_id = str(args.jobs // 2 + 9000)
            pages = {
                "overview": "/",
                "workers": "/workers",
                "queue, waiting, page 1": f"/queue?name={QUEUE}&state=waiting",
                "queue, waiting, page 2,000 (offset 49,975)": (
                    f"/queue?name={QUEUE}&state=waiting&page=2000"
                ),
                "queue, delayed, page 1": f"/queue?name={QUEUE}&state=delayed",
                "queue, prioritized, page 1": f"/queue?name={QUEUE}&state=prioritized",
                "queue, completed, page 1": f"/queue?name={QUEUE}&state=completed",
                "queue, failed, page 40 (offset 975)": f"/queue?name={QUEUE}&state=failed&page=40",
                "job page": f"/job?queue={QUEUE}&id={waiting_id}",
                "search by id": f"/queue?name={QUEUE}&q={waiting_id}",
                "search by name (bounded)": f"/queue?name={QUEUE}&q=urgent",
                "search by data text (bounded)": f"/queue?name={QUEUE}&q=user123%40",
            }
            print(f"\n| page ({args.jobs:,} waiting jobs) | median ms | slowest ms |")
            print("|---|---:|---:|")
            for label, path in pages.items():
                median, worst = await timed(client, path, args.repeat)
                print(f"| {label} | {median:.1f} | {worst:.1f} |", flush=True)
        await app.state.dashboard.close()
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
