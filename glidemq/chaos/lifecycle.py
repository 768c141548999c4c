"""Running one scenario from start to verdict (its lifecycle).

Server up -> `prepare` -> fleet (`glidemq-run`) ready -> producer and `inject` together ->
drain (until every job finished or `--drain-timeout`) -> fleet drained with SIGTERM ->
ledger collected from the job hashes, the events stream and the processors' files ->
invariants -> `check` -> result. `cleanup` and the server's stop always run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ..cli.progress import Progress
from ..client.connection import ConnectionOptions, close_client, create_client
from ..keys import QueueKeys
from ..options.durability import Durability, coerce_durability
from ..queue.queue import Queue
from .app import DIR_ENV
from .collect import EventsTail, read_in_queue, read_jobs, read_leftovers
from .context import ChaosRun
from .fleet import Fleet
from .harvest import Harvest
from .invariants import check_invariants
from .ledger import read_executions
from .outcomes import FaultMark, classify
from .producer import Producer
from .result import build_result, write_records
from .scenario import FleetSettings, Scenario
from .target import start_target

__all__ = ["PROCESSOR", "fresh_run_dir", "resolve_settings", "run_scenario"]

PROCESSOR = "glidemq.chaos.app:process"
# Clients of the chaos process itself: a dead server must not hold a call for 10 s.
_REQUEST_TIMEOUT_MS = 2000
_GRACE = 5.0
_SETTLE_S = 30.0
_STALE = re.compile(r"glidemq: job (\S+) was reclaimed by another worker; result dropped")


def fresh_run_dir(base: Path, name: str) -> Path:
    """A new, empty directory `base/name` (or `name-2`, `name-3`, ... when taken): a run
    never writes into another run's files, so ledgers cannot merge."""
    base.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        path = base / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def resolve_settings(defaults: FleetSettings, args: argparse.Namespace) -> FleetSettings:
    """The scenario's defaults with every common flag given on the command line applied."""
    given = {
        f.name: getattr(args, f.name)
        for f in fields(FleetSettings)
        if getattr(args, f.name, None) is not None
    }
    return replace(defaults, **given)


def _fleet_args(run: ChaosRun) -> list[str]:
    s = run.settings
    argv = [
        "--queue", run.queue_name,
        "--url", run.worker_url,
        "--procs", str(s.procs),
        "--concurrency", str(s.concurrency),
        "--lock-duration", str(s.lock_duration_ms),
        "--stalled-interval", str(s.stalled_interval_ms),
        "--heartbeat-timeout", f"{s.heartbeat_timeout:g}",
        "--grace", f"{_GRACE:g}",
        "--status-interval", "0",
        "--connect-timeout", "30",
    ]  # fmt: skip
    if s.sandbox:
        argv.append("--sandbox")
    durability = _durability(run.args)
    if durability is not None:
        argv += ["--durability", durability.mode, "--replicas", str(durability.wanted)]
        argv += ["--durability-timeout", str(durability.timeout_ms)]
    return argv


def _durability(args: argparse.Namespace) -> Durability | None:
    """What `--durability` / `--durability-timeout` ask of the producer and the fleet."""
    return coerce_durability(
        getattr(args, "durability", None), timeout_ms=getattr(args, "durability_timeout", None)
    )


async def _monitor(run: ChaosRun, queue: Queue[Any, Any], harvest: Harvest | None) -> None:
    """Keep `run.progress` current. On a terminal one line is redrawn in place (jobs done of
    all, elapsed, time left); in logs a status line is printed every 30 s."""
    p = run.progress
    tty = not run.quiet and sys.stderr.isatty()
    line = Progress(run.jobs, name=f"glidemq-chaos {run.scenario}", enabled=tty)
    every = 2.0 if tty else 30.0
    last_say, last_done, last_t = 0.0, 0, time.monotonic()
    try:
        while True:
            try:
                c = await queue.get_job_counts()
            except Exception:  # the server may be down on purpose: read again
                p.errors += 1
                await asyncio.sleep(0.1)
                continue
            # with retention the completed set holds only the newest jobs: count what the
            # harvest read
            harvested = len(harvest.records) if harvest is not None else 0
            p.completed, p.failed = max(c.completed, harvested), c.failed
            p.done = p.completed + p.failed
            p.waiting, p.active = c.waiting + c.prioritized + c.delayed, c.active
            p.peak_backlog = max(p.peak_backlog, p.waiting)
            p.read_at = time.time()
            now = time.monotonic()
            if now - last_say >= every:
                rate = (p.done - last_done) / max(now - last_t, 1e-6)
                procs = len(run.fleet.workers()) if run.fleet else 0
                status = (
                    f"{p.done:,}/{run.jobs:,} done ({rate:,.0f}/s), backlog {p.waiting:,}, "
                    f"active {p.active}, failed {p.failed}, {procs} procs"
                )
                if tty:
                    line.update(p.done, status)
                else:
                    run.say(status)
                last_say, last_done, last_t = now, p.done, now
            await asyncio.sleep(0.1)
    finally:
        line.close()


async def _drain(run: ChaosRun, producer: Producer, timeout: float, settle: float) -> bool:
    """Wait until every enqueued job finished; False when `timeout` passed first, or when
    no job finished for `settle` seconds (what is left then is stuck or lost)."""
    now = time.monotonic()
    deadline = now + timeout
    last_done, last_move = run.progress.done, now
    while run.progress.done < producer.enqueued:
        now = time.monotonic()
        if run.progress.done != last_done:
            last_done, last_move = run.progress.done, now
        if now > deadline or now - last_move > settle:
            return False
        await asyncio.sleep(0.05)
    return True


async def _cancel(task: asyncio.Task[Any] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def run_scenario(scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """Run `scenario` once with `args` (common flags plus its own) and return the result."""
    settings = scenario.settings(resolve_settings(scenario.defaults, args), args)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    if args.workdir:
        workdir = fresh_run_dir(Path(args.workdir), f"{scenario.name}-{seed}")
        keep = True
    else:
        workdir = Path(tempfile.mkdtemp(prefix=f"glidemq-chaos-{scenario.name}-"))
        keep = False
    target = start_target(
        scenario.server, args.url, node_timeout_ms=getattr(args, "node_timeout_ms", None)
    )
    run = ChaosRun(
        scenario=scenario.name,
        args=args,
        settings=settings,
        seed=seed,
        jobs=args.jobs,
        target=target,
        queue_name=f"chaos-{scenario.name}-{seed}-{uuid.uuid4().hex[:6]}",
        workdir=workdir,
        quiet=args.quiet,
    )
    run.say(f"seed {seed}, {args.jobs:,} jobs, server {target.describe()} {target.url}")
    queue: Queue[Any, Any] | None = None
    observer: Queue[Any, Any] | None = None
    tail_client = None
    tail: EventsTail | None = None
    harvest: Harvest | None = None
    harvest_client = None
    tasks: dict[str, asyncio.Task[Any]] = {}
    ok = False
    try:
        await scenario.prepare(run)
        # The producer talks to the server as the workers do (through a proxy, if the
        # scenario put one in between); the run's own eyes connect directly.
        timeout = {"request_timeout_ms": _REQUEST_TIMEOUT_MS}
        direct = ConnectionOptions.from_url(run.target.url, **timeout)
        keys = QueueKeys(run.queue_name)
        observer = Queue(run.queue_name, connection=direct)
        await observer.get_job_counts()  # connects and loads the library
        d = _durability(args)
        queue = run.queue = Queue(
            run.queue_name,
            connection=ConnectionOptions.from_url(run.worker_url, **timeout, durability=d),
        )
        tail_client = run.client = await create_client(direct, name="glidemq-chaos-tail")
        tail = EventsTail(tail_client, keys)
        tasks["tail"] = asyncio.create_task(tail.run())
        exec_dir = workdir / "exec"
        exec_dir.mkdir()
        run.fleet = Fleet(
            PROCESSOR,
            _fleet_args(run) + scenario.fleet_args(run),
            {DIR_ENV: str(exec_dir), **scenario.fleet_env(run)},
            workdir / "glidemq-run.log",
        )
        run.fleet.start()
        await run.fleet.wait_ready(settings.procs)
        run.say(f"{settings.procs} worker processes ready (supervisor pid {run.fleet.pid})")
        options = scenario.job_options(run)
        if options.get("remove_on_complete"):
            # retention removes completed jobs: read each one before it goes
            harvest_client = await create_client(direct, name="glidemq-chaos-harvest")
            harvest = Harvest(harvest_client, keys)
            tasks["harvest"] = asyncio.create_task(harvest.run())
        tasks["monitor"] = asyncio.create_task(_monitor(run, observer, harvest))
        producer = run.producer = Producer(
            queue,
            args.jobs,
            job_ms=settings.job_ms,
            attempts=settings.attempts,
            rate=settings.rate,
            on_enqueued=run.ledger.enqueued,
            overrides=scenario.job_data(run),
            options=options,
        )
        run.started_at = time.time()
        produce = asyncio.create_task(producer.run())
        inject = asyncio.create_task(scenario.inject(run))
        try:
            await asyncio.wait_for(asyncio.gather(produce, inject), args.timeout)
        except TimeoutError:
            run.problem(f"producing and injecting faults took over --timeout {args.timeout:g} s")
        if producer.done.is_set():
            run.extra.setdefault("produce_s", round(producer.finished_at - producer.started_at, 3))
        run.extra.setdefault("producer_retries", producer.retries)
        settle = getattr(args, "settle", None) or _SETTLE_S
        drained = await _drain(run, producer, args.drain_timeout, settle)
        drained_at = time.time()
        if not drained:
            run.problem(
                f"not every job finished within the drain deadline of {args.drain_timeout:g} s "
                f"(or none finished for the settle time of {settle:g} s)"
            )
        run.say("draining the fleet (SIGTERM)")
        code = await run.fleet.stop(_GRACE + 15)
        run.extra["fleet_exit_code"] = code
        if code != 0:
            run.problem(f"glidemq-run did not drain cleanly (exit code {code})")
        await _cancel(tasks.pop("monitor"))
        tail.stop()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(tasks.pop("tail"), 10)
        await tail.count_missed()
        enqueued = run.ledger.enqueued_ids
        if len(enqueued) < args.jobs:
            run.problem(f"only {len(enqueued)} of {args.jobs} jobs were enqueued")
        if harvest is not None:
            harvest.stop()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(tasks.pop("harvest"), 60)
        records = await read_jobs(tail_client, keys, enqueued)
        removed = 0  # completed jobs whose hash retention removed: their harvested record
        if harvest is not None:
            for job_id in enqueued:
                rec = records.get(job_id)
                kept = harvest.records.get(job_id)
                if rec is not None and rec.state is None and kept is not None:
                    records.put(kept)
                    removed += 1
            run.extra["harvest"] = {
                "read": harvest.reads,
                "removed_before_read": harvest.gone,
                "errors": harvest.errors,
                "hashes_removed": removed,
            }
        leftovers = await read_leftovers(tail_client, keys, records)
        in_queue = await read_in_queue(tail_client, keys)
        executions = run.executions = read_executions(exec_dir, sink=run.ledger)
        run.records = records
        verdict = check_invariants(enqueued, records, leftovers, tail, executions, removed=removed)
        scenario.check(run)
        s = settings
        outcomes = classify(
            enqueued,
            records,
            executions,
            in_queue,
            faults=[
                FaultMark(f.kind, f.at, f.ended, frozenset(f.pids), f.hits_all) for f in run.faults
            ],
            predictions=scenario.predictions,
            stale=set(_STALE.findall(run.fleet.log_text())),
            slack_s=(s.lock_duration_ms + 2 * s.stalled_interval_ms) / 1000 + 3.0,
        )
        bound = (
            args.max_reexecutions
            if getattr(args, "max_reexecutions", None) is not None
            else scenario.reexecution_bound(run)
        )
        for rec in records.values():
            outcome = outcomes.by_job.get(rec.job_id)
            if rec.state == "completed" and rec.finished_on is not None:
                run.ledger.add(
                    "completed", rec.job_id, rec.finished_on, rec.result_pid, outcome=outcome
                )
            elif rec.state == "failed" and rec.finished_on is not None:
                run.ledger.add(
                    "failed",
                    rec.job_id,
                    rec.finished_on,
                    None,
                    reason=rec.failed_reason,
                    outcome=outcome,
                )
            else:
                run.ledger.add("unfinished", rec.job_id, drained_at, None, outcome=outcome)
        result = build_result(
            run, len(enqueued), verdict, records, executions, tail, drained_at, outcomes, bound
        )
        for f in run.faults:  # each fault, and its recovery for the report's plot
            run.ledger.add("fault", None, f.at, f.pid, kind=f.kind, detail=f.detail)
            run.ledger.add("recovery", None, f.at, f.pid, kind=f.kind, recovery_s=f.recovery_s)
        write_records(workdir, result, run.ledger)
        ok = bool(result["ok"])
        return result
    finally:
        for name in list(tasks):
            await _cancel(tasks.pop(name))
        try:
            await scenario.cleanup(run)
        finally:
            if args.ledger_out:
                run.ledger.write(Path(args.ledger_out))
            run.ledger.close()
            if run.fleet is not None:
                run.fleet.kill_all()
            if observer is not None and ok and not target.embedded:
                # a server we were lent: take the run's queue away (kept when it failed)
                with contextlib.suppress(Exception):
                    await observer.obliterate(force=True)
            for q in (queue, observer):
                if q is not None:
                    await q.close()
            await close_client(tail_client)
            await close_client(harvest_client)
            target.stop()
            if keep or not ok:
                run.say(f"logs and ledger kept in {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
