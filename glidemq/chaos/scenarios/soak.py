"""soak: every fault kind, at random, on the 3+3 cluster, for a fixed duration.

`glidemq-chaos soak --duration 20m --jobs 1000000` paces the producer so the jobs spread
over the duration and, until it is over, injects one fault every `--fault-every` seconds
(on average, seeded), every kind once in a seeded random order before any repeats:

- `sigkill-worker`: a worker process SIGKILLed;
- `kill-burst`: four worker processes SIGKILLed 0.5 s apart (a short kill storm);
- `sigstop-worker`: a worker process frozen until the supervisor kills it (a hang);
- `sigkill-sandbox-child`: a sandbox child SIGKILLed;
- `sigkill-primary`: the primary of the queue's slot SIGKILLed (a failover), restarted as a
  replica once its replica took over;
- `node-stall`: the primary of the queue's slot frozen (SIGSTOP) for 0.5 s, below the
  cluster node timeout: to its clients, a network partition that heals (the TCP proxy of
  `network` cannot sit in front of a cluster, whose clients learn node addresses from the
  nodes themselves);
- `metrics-flood`: 50 idle connections on the supervisor's metrics port for 2 s, with a
  `/health` probe (latency reported, not bounded here: `metrics-flood` bounds it).

Jobs are added with `remove_on_complete=--keep-completed` (50,000), so the server's memory
stays flat: the run reads every completed job before retention removes it
(`glidemq.chaos.harvest`). Besides, `--growers` seeded jobs grow past
`--max-memory-per-child` on their first attempt (`memory-grow`: the sandbox child is
retired, the job completes on a retry). Every
`--sample-every` seconds the run samples the worker processes' RSS and the primaries'
`used_memory`; the result has the samples, and the run fails when the largest worker's RSS
at the end is more than `--max-rss-growth` (10 %) above its value after the first 10 % of
the jobs (plus 8 MiB for allocator noise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import socket
import statistics
import time
from dataclasses import replace
from typing import Any

import psutil

from ...server.valkey import EmbeddedValkey
from ..context import ChaosRun
from ..faults import kill_process, process_tree, wait_gone
from ..registry import register
from ..scenario import FleetSettings, Scenario
from .kill_storm import STALLED_TOO_OFTEN
from .memory_kill import OUT_OF_MEMORY
from .sandbox_crash import CHILD_KILLED, CHILD_KILLED_LOADING

__all__ = ["KINDS", "Soak", "parse_duration"]

KINDS: tuple[str, ...] = (
    "sigkill-worker",
    "kill-burst",
    "sigstop-worker",
    "sigkill-sandbox-child",
    "sigkill-primary",
    "node-stall",
    "metrics-flood",
)
_RSS_SLACK_MB = 8.0
# the last memory sample must come after this share of the jobs is done
_SAMPLED_SHARE = 0.9
# Well below the cluster node timeout: on a loaded machine a longer freeze gets the
# node failed over, and writes it acknowledged meanwhile are lost with it (asynchronous
# replication): a different fault from the one meant here.
_STALL_S = 0.5
# A 2 s node timeout fails a loaded node over on its own (seen at 2-3 per minute on a
# busy 2-core machine), and writes it acknowledged meanwhile may be lost with it; 5 s, as
# in docker-compose.cluster.yml, keeps failovers to the ones the soak injects.
_NODE_TIMEOUT_MS = 5000
# A killed node restarts by loading its data (hundreds of MB late in a long soak) and the
# cluster is healthy once its replica synced: both take tens of seconds under load.
_NODE_START_S = 120.0
# The server keeps this many completed jobs (the run reads each one as it completes):
# its memory stays flat however many jobs the soak runs.
_KEEP_COMPLETED = 50_000
_HEALTHY_S = 180.0


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `2m` or `1h` (argparse `type=`)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 2m or 1h, got {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mb(n: float) -> float:
    return round(n / 2**20, 1)


@register
class Soak(Scenario):
    name = "soak"
    summary = "every fault kind at random on the 3+3 cluster for --duration, sampling memory"
    server = "cluster"
    controls_server = True
    defaults = FleetSettings(procs=3, concurrency=8, job_ms=5.0, sandbox=True, attempts=3, faults=0)
    predictions = (CHILD_KILLED, CHILD_KILLED_LOADING, OUT_OF_MEMORY, STALLED_TOO_OFTEN)

    def __init__(self) -> None:
        self.port = 0
        self.down: list[EmbeddedValkey] = []
        self.samples: list[dict[str, Any]] = []
        self.background: set[asyncio.Task[Any]] = set()
        self.unplanned: list[dict[str, Any]] = []
        self.checked = 0.0
        self.sample_errors = 0

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--duration", type=parse_duration, default=120.0, help="how long (default 2m)"
        )
        parser.add_argument(
            "--fault-every",
            type=float,
            default=6.0,
            metavar="SECONDS",
            help="mean time between two faults (default 6)",
        )
        parser.add_argument("--growers", type=int, default=4, help="jobs that outgrow memory")
        parser.add_argument("--max-memory-per-child", type=int, default=128, metavar="MB")
        parser.add_argument("--sample-every", type=float, default=5.0, metavar="SECONDS")
        parser.add_argument("--max-rss-growth", type=float, default=0.10, metavar="FRACTION")
        parser.add_argument(
            "--keep-completed",
            type=int,
            default=_KEEP_COMPLETED,
            metavar="N",
            help="jobs are added with remove_on_complete=N, so the server keeps only the "
            f"newest N completed jobs (default {_KEEP_COMPLETED:,}; 0 keeps all)",
        )
        parser.add_argument(
            "--node-timeout-ms",
            type=int,
            default=_NODE_TIMEOUT_MS,
            metavar="MS",
            help=f"the cluster's cluster-node-timeout (default {_NODE_TIMEOUT_MS})",
        )

    def settings(self, settings: FleetSettings, args: argparse.Namespace) -> FleetSettings:
        # injecting lasts the whole duration: --timeout must not cut it off
        args.timeout = max(float(args.timeout), float(args.duration) + 300.0)
        if args.rate is None:  # spread the jobs over 85 % of the duration
            return replace(settings, rate=args.jobs / (0.85 * args.duration))
        return settings

    def fleet_args(self, run: ChaosRun) -> list[str]:
        self.port = _free_port()
        return [
            "--metrics-port",
            str(self.port),
            "--max-memory-per-child",
            str(run.args.max_memory_per_child),
        ]

    def job_data(self, run: ChaosRun) -> dict[str, dict[str, object]]:
        picks = {int(run.rng.uniform(0.1, 0.8) * run.jobs) for _ in range(run.args.growers)}
        growers = [f"j{i}" for i in sorted(picks)]
        run.extra["_growers"] = growers
        grow = 3 * int(run.args.max_memory_per_child)
        return {j: {"grow_mb": grow, "grow_attempts": 1} for j in growers}

    def job_options(self, run: ChaosRun) -> dict[str, object]:
        keep = int(run.args.keep_completed)
        return {"remove_on_complete": keep} if keep > 0 else {}

    def reexecution_bound(self, run: ChaosRun) -> int:
        s = run.settings
        growers = len(run.extra.get("_growers", ()))
        return super().reexecution_bound(run) + growers * s.attempts * (2 * s.concurrency + 2)

    # -- the run ----------------------------------------------------------------------------

    async def inject(self, run: ChaosRun) -> None:
        assert run.fleet is not None and run.target.cluster is not None
        await run.wait_workers(run.settings.procs)
        if run.extra["_growers"]:
            run.fault("memory-grow", None, hits_all=False, jobs=run.extra["_growers"])
        sampler = asyncio.create_task(self._sample(run))
        began = time.monotonic()
        end = began + float(run.args.duration)
        counts = dict.fromkeys(KINDS, 0)
        deck: list[str] = []
        try:
            while True:
                pause = run.rng.expovariate(1 / float(run.args.fault_every))
                if time.monotonic() + pause >= end:
                    break
                await asyncio.sleep(pause)
                if not deck:  # every kind once, in a seeded order, then again
                    deck = list(KINDS)
                    run.rng.shuffle(deck)
                kind = deck.pop()
                counts[kind] += 1
                await getattr(self, "_" + kind.replace("-", "_"))(run)
            await asyncio.sleep(max(0.0, end - time.monotonic()))
        finally:
            run.extra["soak"] = {
                "duration_s": round(time.monotonic() - began, 1),
                "by_kind": counts,
            }
            await asyncio.gather(*self.background, return_exceptions=True)
            sampler.cancel()
            with contextlib.suppress(BaseException):
                await sampler

    async def _sigkill_worker(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        workers = run.fleet.ready_workers()
        if workers:
            victim = run.rng.choice(workers)
            hurt = process_tree(victim)
            if kill_process(victim, signal.SIGKILL):
                run.fault("sigkill-worker", victim.pid, pids=hurt)

    async def _kill_burst(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        for _ in range(4):
            workers = run.fleet.ready_workers()
            if workers:
                victim = run.rng.choice(workers)
                hurt = process_tree(victim)
                if kill_process(victim, signal.SIGKILL):
                    run.fault("kill-burst", victim.pid, pids=hurt)
            await asyncio.sleep(0.5)

    async def _sigstop_worker(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        workers = run.fleet.ready_workers()
        if not workers:
            return
        victim = run.rng.choice(workers)
        hurt = process_tree(victim)
        kill_process(victim, signal.SIGSTOP)
        fault = run.fault("sigstop-worker", victim.pid, pids=hurt)

        async def reap() -> None:  # the supervisor kills it; the soak goes on meanwhile
            gone = await wait_gone(victim, run.settings.heartbeat_timeout + 15.0)
            fault.ended = time.time()
            if gone is None:
                run.problem(f"soak: the frozen worker pid {victim.pid} was never killed")
                kill_process(victim, signal.SIGKILL)

        task = asyncio.create_task(reap())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _sigkill_sandbox_child(self, run: ChaosRun) -> None:
        assert run.fleet is not None
        children = run.fleet.sandbox_children()
        if children:
            victim = run.rng.choice(children)
            if kill_process(victim, signal.SIGKILL):
                run.fault("sigkill-sandbox-child", victim.pid)

    def _slot_primary(self, run: ChaosRun) -> EmbeddedValkey:
        assert run.target.cluster is not None
        return run.target.cluster.primary_for_key(f"glide:{{{run.queue_name}}}:stream")

    async def _sigkill_primary(self, run: ChaosRun) -> None:
        cluster = run.target.cluster
        assert cluster is not None
        await asyncio.to_thread(cluster.wait_healthy, _HEALTHY_S)
        primary = await asyncio.to_thread(self._slot_primary, run)
        pid = primary.pid
        cluster.kill_node(primary)
        self.down.append(primary)
        fault = run.fault("sigkill-primary", pid, hits_all=True, node=primary.port)
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if await asyncio.to_thread(self._slot_primary, run) is not primary:
                    break
            await asyncio.sleep(0.1)
        fault.ended = time.time()
        fault.detail["promoted_s"] = round(fault.ended - fault.at, 3)
        await asyncio.to_thread(self._restart_down, run)

    def _restart_down(self, run: ChaosRun) -> None:
        cluster = run.target.cluster
        assert cluster is not None
        while self.down:
            # loading its data again takes a while on a busy machine
            cluster.restart_node(self.down.pop(), timeout=_NODE_START_S)
        cluster.wait_healthy(_HEALTHY_S)

    async def _node_stall(self, run: ChaosRun) -> None:
        cluster = run.target.cluster
        assert cluster is not None
        await asyncio.to_thread(cluster.wait_healthy, _HEALTHY_S)
        node = await asyncio.to_thread(self._slot_primary, run)
        node.kill(signal.SIGSTOP, wait=False)
        fault = run.fault("node-stall", node.pid, hits_all=True, node=node.port, hold_s=_STALL_S)
        try:
            await asyncio.sleep(_STALL_S)
        finally:
            node.kill(signal.SIGCONT, wait=False)
            fault.ended = time.time()

    async def _metrics_flood(self, run: ChaosRun) -> None:
        held = []
        fault = run.fault("metrics-flood", None, hits_all=False, idle=50)
        try:
            began = time.monotonic()
            for _ in range(50):  # a server that accepts nothing fills its backlog: stop then
                if time.monotonic() - began > 1.0:
                    break
                with contextlib.suppress(OSError, TimeoutError):
                    conn = asyncio.open_connection("127.0.0.1", self.port)
                    held.append((await asyncio.wait_for(conn, 0.2))[1])
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self.port), 2.0
                )
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                await asyncio.wait_for(reader.read(), 2.0)
                writer.close()
                fault.detail["health_ms"] = round((time.monotonic() - began) * 1000, 1)
            except (TimeoutError, OSError):
                fault.detail["health_ms"] = None  # no answer within 2 s
            await asyncio.sleep(max(0.0, began + 2.0 - time.monotonic()))
        finally:
            for w in held:
                w.close()
            fault.ended = time.time()

    async def _sample(self, run: ChaosRun) -> None:
        every = float(run.args.sample_every)
        last: int | None = None
        while True:
            try:
                last = await self._sample_once(run, last)
            except Exception as exc:  # a node down mid-sample: skip this one, keep sampling
                self.sample_errors += 1
                if self.sample_errors == 1:
                    run.say(f"memory sample skipped: {type(exc).__name__}: {exc}")
            await asyncio.sleep(every)

    async def _sample_once(self, run: ChaosRun, last: int | None) -> int | None:
        assert run.fleet is not None and run.target.cluster is not None
        with contextlib.suppress(Exception):
            primary = (await asyncio.to_thread(self._slot_primary, run)).port
            planned = any(f.kind == "sigkill-primary" and f.at > self.checked for f in run.faults)
            if last is not None and primary != last and not planned:
                # nobody asked for this one: a node the cluster thought dead
                self.unplanned.append(
                    {"t_s": round(time.time() - run.started_at, 1), "from": last, "to": primary}
                )
                run.say(f"unplanned failover of the queue's slot: node {last} -> {primary}")
            last = primary
            self.checked = time.time()
        workers = []
        for p in run.fleet.workers():
            with contextlib.suppress(psutil.Error):
                workers.append(p.memory_info().rss)
        children = []
        for p in run.fleet.sandbox_children():
            with contextlib.suppress(psutil.Error):
                children.append(p.memory_info().rss)
        server = 0
        for node in await asyncio.to_thread(run.target.cluster.primaries):
            with contextlib.suppress(Exception):
                info = str(await asyncio.to_thread(node.execute, "INFO", "memory"))
                m = re.search(r"used_memory:(\d+)", info)
                server += int(m.group(1)) if m else 0
        self.samples.append(
            {
                "t_s": round(time.time() - run.started_at, 1),
                "done": run.progress.done,
                "worker_rss_max_mb": _mb(max(workers, default=0)),
                "worker_rss_mb": _mb(sum(workers)),
                "children_rss_mb": _mb(sum(children)),
                "server_used_mb": _mb(server),
            }
        )
        return last

    def check(self, run: ChaosRun) -> None:
        run.extra["unplanned_failovers"] = self.unplanned
        samples = self.samples
        run.extra["memory_samples"] = samples[:: max(1, len(samples) // 200)]
        run.extra["memory_sample_errors"] = self.sample_errors
        if len(samples) < 3 or samples[-1]["done"] < run.jobs * _SAMPLED_SHARE:
            # memory is judged at the end of the run: samples that stop early prove nothing
            run.problem(
                f"soak: memory was sampled {len(samples)} times, the last at "
                f"{samples[-1]['done'] if samples else 0:,} of {run.jobs:,} jobs done: too "
                "few to judge whether it stayed flat"
            )
            return
        tenth = next((s for s in samples if s["done"] >= run.jobs / 10), samples[0])
        at = samples.index(tenth)
        base = statistics.median(s["worker_rss_max_mb"] for s in samples[at : at + 3])
        end = statistics.median(s["worker_rss_max_mb"] for s in samples[-3:])
        limit = base * (1 + float(run.args.max_rss_growth)) + _RSS_SLACK_MB
        run.extra["memory"] = {
            "worker_rss_max_mb": {
                "start": samples[0]["worker_rss_max_mb"],
                "first_10pct": base,
                "end": end,
            },
            "server_used_mb": {
                "start": samples[0]["server_used_mb"],
                "end": samples[-1]["server_used_mb"],
            },
            "limit_mb": round(limit, 1),
        }
        if end > limit:
            run.problem(
                f"soak: worker RSS grew from {base} MiB (after the first 10 % of the jobs) to "
                f"{end} MiB at the end, above {limit:.1f} MiB"
            )

    async def cleanup(self, run: ChaosRun) -> None:
        for t in list(self.background):
            t.cancel()
        if self.down and run.target.cluster is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._restart_down, run)
