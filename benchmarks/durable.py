"""What a durable workflow costs: workflows of 3 no-op steps against plain no-op jobs, one
worker at concurrency 50 on an embedded Valkey, the two kinds alternating within one run.

A third kind runs the same workflows with each step call sent alone (the step calls of one
loop iteration are otherwise sent together, `glidemq/wire/steps.py`), to show what that
coalescing saves.

Reported per kind: runs per second (jobs/s, workflows/s), steps per second, the server's
and this process's CPU per run, and the library calls (FCALL) per run, read from
`INFO commandstats`: a workflow of 3 steps should cost 3 calls more than a plain job.

Run: .venv/bin/python benchmarks/durable.py [runs] [rounds]
Numbers from one machine drift; compare the two kinds within one run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

import glidemq
from glidemq import Job, Queue, Worker, WorkflowContext
from glidemq.bench.cpu import process_cpu_seconds, self_cpu_seconds
from glidemq.server.valkey import EmbeddedValkey
from glidemq.wire import steps as wire_steps

CONCURRENCY = 50


async def noop(job: Job[Any, Any]) -> None:
    return None


async def nothing(i: int) -> int:
    return i


def workflow_of(queue: str) -> glidemq.Workflow[..., Any]:
    @glidemq.workflow(queue, name="three")
    async def three(ctx: WorkflowContext, i: int) -> int:
        a = await ctx.step("a", nothing, i)
        b = await ctx.step("b", nothing, a)
        return await ctx.step("c", nothing, b)

    return three


async def fcalls(q: Queue[Any, Any]) -> int:
    ctx = await q._context()
    info = await ctx.client.custom_command(["INFO", "commandstats"])
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("cmdstat_fcall:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


async def run(url: str, pid: int, name: str, kind: str, n: int) -> dict[str, float]:
    wire_steps._MAX_PIPELINE = 1 if kind == "alone" else 64
    async with Queue(name, connection=url) as q:
        if kind in ("workflow", "alone"):
            wf = workflow_of(name)
            processor: Any = glidemq.task_processor(wf)
            jobs = [(wf.name, wf.payload(i), wf.options) for i in range(n)]
        else:
            processor = noop
            jobs = [("noop", {"i": i}, None) for i in range(n)]
        for start in range(0, n, 1000):
            await q.add_bulk(jobs[start : start + 1000])
        calls0 = await fcalls(q)
        t0, c0, s0 = time.perf_counter(), self_cpu_seconds(), process_cpu_seconds(pid)
        async with Worker(name, processor, connection=url, concurrency=CONCURRENCY) as w:
            while w.completed_count < n:  # noqa: ASYNC110 - a counter costs nothing per job
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - t0
            client, server = self_cpu_seconds() - c0, process_cpu_seconds(pid) - s0
            calls = await fcalls(q) - calls0
            failed = w.failed_count
        assert failed == 0, f"{failed} {kind} runs failed"
        await q.obliterate(force=True)
    return {
        "per_s": n / elapsed,
        "server_us": server / n * 1e6,
        "client_us": client / n * 1e6,
        "fcalls": calls / n,
    }


async def main(n: int, rounds: int) -> None:
    with EmbeddedValkey() as server:
        assert server.pid is not None
        kinds = ("plain", "workflow", "alone")
        got: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                got[kind].append(await run(server.url, server.pid, f"{kind}{r}", kind, n))

    def med(kind: str, key: str) -> float:
        return statistics.median(x[key] for x in got[kind])

    print("kinds: plain no-op jobs; workflows of 3 steps; the same with each call alone")
    print(f"{n} runs per kind, {rounds} rounds, one worker at concurrency {CONCURRENCY}")
    for kind in kinds:
        runs = ", ".join(f"{x['per_s']:,.0f}" for x in got[kind])
        steps = f", {3 * med(kind, 'per_s'):,.0f} steps/s" if kind != "plain" else ""
        print(
            f"{kind:8s} {med(kind, 'per_s'):>8,.0f} runs/s{steps} (runs: {runs}); "
            f"server {med(kind, 'server_us'):.0f} us, client {med(kind, 'client_us'):.0f} us, "
            f"{med(kind, 'fcalls'):.2f} FCALLs per run"
        )
    ratio = med("workflow", "per_s") / med("plain", "per_s")
    extra = med("workflow", "fcalls") - med("plain", "fcalls")
    print(f"workflow / plain: {ratio:.2f}; {extra:.2f} FCALLs more per run (3 steps)")
    alone = med("workflow", "per_s") / med("alone", "per_s")
    print(f"workflow (calls together) / alone (each call its own round trip): {alone:.2f}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(args[0] if args else 5000, args[1] if len(args) > 1 else 4))
