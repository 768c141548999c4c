"""Edits of a job's data racing a worker that fetches it: how many acknowledged edits ran
with the old data.

    .venv/bin/python tools/edit_race.py                 # 600 edits, hold windows 0 and 20
    .venv/bin/python tools/edit_race.py --jobs 2000 --hold-window 20

Starts an embedded Valkey (or uses --url), adds jobs with data {"v": "old"} while a Worker
runs them, and edits each job soon after its add through the admin layer (the dashboard's
"Edit data", the proxy and `glidemq` go through it) to {"v": "new"}. An edit the admin layer
acknowledges must be seen by the run; one it refuses must not be. Prints, per hold window,
the edits acknowledged, refused, and acknowledged but run with the old data (must be 0).
Exit code 1 when any acknowledged edit ran with the old data.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import uuid
from typing import Any

from glidemq import Job, Queue, Worker
from glidemq.admin.session import Admin


async def race(url: str, jobs: int, hold_window: int, seed: int) -> tuple[int, int, int]:
    """(acknowledged, refused, acknowledged but run with the old data)."""
    rnd = random.Random(seed)
    name = f"edit-race-{uuid.uuid4().hex[:8]}"
    seen: dict[str, Any] = {}
    acked: set[str] = set()
    refused = 0
    edits: list[asyncio.Task[None]] = []
    async with Queue(name, connection=url) as queue, Admin(url) as admin:
        added = await queue.add_bulk([("edit-me", {"v": "old"}, None)] * jobs)
        ids = [j.id for j in added if j is not None]
        index = {j: i for i, j in enumerate(ids)}
        spread = 1 if hold_window == 0 else 30  # held jobs sit between the run and the fetch
        edited: set[str] = set()

        async def edit(job_id: str) -> None:
            nonlocal refused
            await asyncio.sleep(rnd.random() * 0.002)
            result = await admin.update_data(name, job_id, {"v": "new"})
            if result.ok:
                acked.add(job_id)
            else:
                refused += 1

        async def processor(job: Job[Any, Any]) -> None:
            seen[job.id] = job.data
            # edit a later job about when a fetch takes it (this run's end fetches the next)
            i = index.get(job.id, len(ids)) + 1 + rnd.randrange(spread)
            if i < len(ids) and ids[i] not in edited:
                edited.add(ids[i])
                edits.append(asyncio.create_task(edit(ids[i])))
            await asyncio.sleep(rnd.random() * 0.002)

        async with Worker(name, processor, connection=url, hold_window=hold_window):
            deadline = asyncio.get_running_loop().time() + 120
            while any(i not in seen for i in ids):
                if asyncio.get_running_loop().time() > deadline:
                    raise SystemExit("not every job ran within 120 s")
                await asyncio.sleep(0.05)
            await asyncio.gather(*edits)
        stale = [i for i in acked if seen[i] != {"v": "new"}]
        for job_id in stale[:3]:
            stored = await queue.get_job(job_id)
            print(
                f"  job {job_id}: edit acknowledged, ran with {seen[job_id]}, "
                f"stored {stored.data if stored else None}"
            )
        await queue.obliterate(force=True)
    return len(acked), refused, len(stale)


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="server (default: an embedded Valkey started here)")
    p.add_argument("--jobs", type=int, default=600)
    p.add_argument("--hold-window", type=int, action="append", help="default: 0 and 20")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    windows = args.hold_window or [0, 20]
    bad = 0

    async def run(url: str) -> None:
        nonlocal bad
        for hw in windows:
            acked, refused, stale = await race(url, args.jobs, hw, args.seed)
            bad += stale
            print(
                f"hold_window={hw}: {acked + refused} edits, {acked} acknowledged, "
                f"{refused} refused, {stale} acknowledged but ran with the old data"
            )

    if args.url:
        await run(args.url)
    else:
        from glidemq.server import EmbeddedValkey

        with EmbeddedValkey() as server:
            await run(server.url)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
