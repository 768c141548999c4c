"""One simulated world: a server, a producer and workers as processes on the virtual loop,
carrying out a plan (glidemq.sim.plan) and recording its history.

Everything here drives the real front end: `Queue`, `FlowProducer`, `Worker`, and the admin
action the dashboard uses, over the simulated connections of glidemq.sim.net; the server is
glidemq.memory with the real function library. The world only decides when things happen
and what breaks.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from ..admin import actions as admin_actions
from ..admin.view import QueueView
from ..client.connection import ConnectionOptions, create_client
from ..client.context import QueueContext
from ..client.retry import RetryPolicy
from ..errors import GlideMQError, JobStateError
from ..flows.flow import FlowProducer
from ..flows.plan import FlowJob
from ..job.job import Job
from ..keys import QueueKeys
from ..queue.queue import Queue
from ..types import Backoff, Deduplication, JobOptions
from ..worker.worker import Worker
from .behaviour import UserProcessor, make_processor
from .history import History
from .loop import Process, SimLoop
from .net import NetConfig, Network, ProcessClock, SimBackend
from .plan import GROUP_LIMITS, QUEUE, Action, Fault, JobSpec, Plan
from .server import SimServer

__all__ = ["EPOCH_MS", "WorkerSlot", "World"]

EPOCH_MS = 1_767_225_600_000  # 2026-01-01: the wall clock's zero, the same on every run
_POLL_S = 0.25


@dataclass
class WorkerSlot:
    """One worker place ("w1"): the process filling it now, and its Worker."""

    name: str
    process: Process
    generation: int = 1
    worker: Worker[Any, Any] | None = None
    clock: ProcessClock | None = None
    closing: bool = False
    paused: bool = False

    @property
    def consumer(self) -> str:
        return self.name if self.generation == 1 else f"{self.name}.{self.generation}"


@dataclass
class JobRecord:
    """What the world knows of an acknowledged job."""

    spec: JobSpec
    id: str
    version: int = 0
    children: list[str] = field(default_factory=list)


class World:
    """Carries out one plan; `history` is what happened."""

    def __init__(self, plan: Plan, app: UserProcessor | None = None) -> None:
        self.plan = plan
        self.s = plan.settings
        self.app = app
        self.loop = SimLoop()
        self.t0 = self.loop.time()
        self.history = History(self.t0)
        self.keys = QueueKeys(QUEUE)
        self.server = SimServer(self.loop, EPOCH_MS, self._on_event, self._on_reclaim)
        self._server_ctx = contextvars.copy_context()
        net = NetConfig(
            latency=self.s.latency_s,
            reorder=self.s.reorder,
            request_timeout=self.s.request_timeout_s,
        )
        self.network = Network(
            self.loop,
            self.server,
            random.Random(f"glidemq-sim:{plan.seed}:net"),
            net,
            self._server_ctx,
        )
        self.network.on_lost = self._on_lost
        self.network.on_timeout = lambda process: self.record("call-timeout", process)
        self.network.on_stranded = self._on_stranded
        self.rng = random.Random(f"glidemq-sim:{plan.seed}:world")
        self.producer = Process("producer")
        self.producer_clock = ProcessClock(self.loop, EPOCH_MS)
        self.slots = {
            f"w{i}": WorkerSlot(f"w{i}", Process(f"w{i}")) for i in range(1, self.s.workers + 1)
        }
        self.jobs: dict[str, JobRecord] = {}  # spec name -> acknowledged job
        self.by_id: dict[str, JobRecord] = {}
        self.queue: Queue[Any, Any] | None = None
        self.view: QueueView | None = None
        self._runs: dict[int, tuple[Job[Any, Any], int]] = {}  # id(job) -> (job, token)
        self._tokens = 0
        self.quiet_at = 0.0
        self.blocked: set[str] = set()  # jobs that blocked their worker's loop (once each)
        self.finished_at = 0.0

    # -- wiring --------------------------------------------------------------------------

    def now(self) -> float:
        return self.loop.time()

    def record(self, what: str, who: str, job: str = "", **info: Any) -> None:
        self.history.add(self.loop.time(), what, who, job, **info)

    def options(self, process: Process, clock: ProcessClock) -> ConnectionOptions:
        # production's ratio of the retry budget to the lock (10 s of 30 s by default)
        retry = RetryPolicy(budget=self.s.lock_ms / 3000)
        return ConnectionOptions(backend=SimBackend(self.network, process, clock), retry=retry)

    def at(self, seconds: float, fn: Any, *args: Any) -> None:
        """Run `fn(*args)` at `seconds` into the run, as the simulator (no process)."""
        self.loop.call_at(self.t0 + seconds, fn, *args, context=self._server_ctx)

    def _on_event(self, event: str, job: str, fields: dict[str, str]) -> None:
        if event in ("progress", "added", "promoted", "groupPaused", "groupResumed"):
            return
        info = {k: v for k, v in fields.items() if k in ("failedReason", "reason", "late_ms")}
        self.record("ev", "server", job, event=event, **info)
        if event == "suspended":
            rec = self.by_id.get(job)
            wait = 0.5 if rec is None else int(rec.spec.run.get("s", 500)) / 1000
            self.loop.call_later(wait, self._signal, job, context=self._server_ctx)

    def _on_reclaim(self, job: str, entry: str, owner: str, start: str) -> None:
        self.record("reclaim", "server", job, entry=entry, owner=owner, start=start)

    def _on_stranded(self, process: str, jobs: list[tuple[str, str]]) -> None:
        for entry, job in jobs:
            self.record("stranded", process, job, entry=entry)

    def _on_lost(self, process: str, request_type: int) -> None:
        self.record("lost-reply", process)

    # -- runs ----------------------------------------------------------------------------

    def run_started(self, slot: WorkerSlot, job: Job[Any, Any]) -> int:
        """A processor began: record it with what the server says about the job now."""
        self._tokens += 1
        token = self._tokens
        self._runs[id(job)] = (job, token)
        holder = self.server.holder(self.keys.stream, job.entry_id or "")
        state = self.server.job_hash(self.keys.base + "job:" + job.id).get("state", "")
        data = job.data if isinstance(job.data, dict) else {}
        self.record(
            "start",
            slot.consumer,
            job.id,
            run=token,
            name=job.name,
            entry=job.entry_id or "",
            attempt=job.attempts_made,
            v=data.get("v", -1),
            holder=holder or "-",
            state=state,
        )
        return token

    def run_ended(self, slot: WorkerSlot, job: Job[Any, Any], token: int, outcome: str) -> None:
        self.record("end", slot.consumer, job.id, run=token, outcome=outcome)

    def _token(self, job: Any) -> int:
        got = self._runs.get(id(job))
        return -1 if got is None or got[0] is not job else got[1]

    # -- workers -------------------------------------------------------------------------

    async def _start_worker(self, slot: WorkerSlot) -> None:
        s = self.s
        slot.clock = ProcessClock(self.loop, EPOCH_MS)
        worker: Worker[Any, Any] = Worker(
            QUEUE,
            make_processor(self, slot, self.app),
            connection=self.options(slot.process, slot.clock),
            concurrency=s.concurrency,
            lock_duration=s.lock_ms,
            stalled_interval=s.stalled_ms,
            max_stalled_count=s.max_stalled,
            hold_window=s.hold_window,
            close_timeout=s.close_timeout_s,
            block_timeout=1000,
            consumer=slot.consumer,
        )
        who = slot.consumer
        worker.on(
            "completed",
            lambda j, rv: self.record(
                "recorded", who, j.id, run=self._token(j), outcome="completed"
            ),
        )
        worker.on(
            "failed",
            lambda j, e: self.record("recorded", who, j.id, run=self._token(j), outcome="failed"),
        )
        worker.on("error", lambda e: self.record("worker-error", who, error=type(e).__name__))
        slot.worker = worker
        try:
            await worker.start()
        except GlideMQError as exc:
            self.record("start-failed", who, error=type(exc).__name__)
            self.loop.call_later(0.5, self._respawn, slot, context=self._server_ctx)
            return
        self.record("worker-up", who)

    def crash(self, slot: WorkerSlot, why: str) -> None:
        """SIGKILL the process of `slot`; a new one takes its place a moment later."""
        if not slot.process.alive:
            return
        self.record("crash", slot.consumer, why=why)
        self.loop.kill(slot.process)
        self.network.drop(slot.process)
        lo, hi = self.s.respawn_s
        self.loop.call_later(
            self.rng.uniform(lo, hi), self._respawn, slot, context=self._server_ctx
        )

    def _respawn(self, slot: WorkerSlot) -> None:
        slot.generation += 1
        slot.process = Process(slot.consumer)
        slot.worker = None
        slot.closing = slot.paused = False
        slot.process.spawn(self._start_worker(slot))

    def freeze(self, slot: WorkerSlot, seconds: float) -> None:
        if slot.process.state.value != "running":
            return
        process = slot.process
        self.record("freeze", slot.consumer, seconds=seconds)
        self.loop.freeze(process)
        self.loop.call_later(seconds, self._thaw, slot, process, context=self._server_ctx)

    def block(self, slot: WorkerSlot, job: Job[Any, Any], seconds: float) -> bool:
        """A processor blocks its worker's loop (the `block` fault), on the job's first run
        only; recorded as a freeze of the process, which it is. Whether it blocked."""
        if job.id in self.blocked or slot.process.state.value != "running":
            return False
        self.blocked.add(job.id)
        self.record("fault", slot.consumer, kind="freeze", length=seconds, size=0.0, job=job.id)
        self.freeze(slot, seconds)
        return True

    def _thaw(self, slot: WorkerSlot, process: Process) -> None:
        if process.state.value == "frozen":
            self.record("thaw", process.name)
            self.loop.thaw(process)

    # -- the producer --------------------------------------------------------------------

    async def _setup(self) -> None:
        opts = self.options(self.producer, self.producer_clock)
        self.queue = Queue(QUEUE, connection=opts)
        client = await create_client(opts, name="glidemq-admin")
        self.view = QueueView(QueueContext(client, self.keys, clock=opts.clock))
        if self.s.global_concurrency:
            await self.queue.set_global_concurrency(self.s.global_concurrency)
            self.record(
                "act", "producer", kind="global-concurrency", value=self.s.global_concurrency
            )
        if self.s.rate is not None:
            await self.queue.set_global_rate_limit(*self.s.rate)
            self.record("act", "producer", kind="rate", max=self.s.rate[0], ms=self.s.rate[1])

    def _options(self, spec: JobSpec) -> JobOptions:
        o = dict(spec.opts)
        if "backoff" in o:
            o["backoff"] = Backoff(**o["backoff"])
        if "deduplication" in o:
            o["deduplication"] = Deduplication(**o["deduplication"])
        return JobOptions(**o)

    def _acked(self, spec: JobSpec, job: Job[Any, Any] | None, how: str) -> None:
        if job is None:
            self.record("add-skipped", "producer", n=spec.n, how=how)
            return
        rec = JobRecord(spec, job.id)
        self.jobs[spec.name] = rec
        self.by_id[job.id] = rec
        self.record("add", "producer", job.id, n=spec.n, how=how, **_summary(spec))

    async def _add(self, spec: JobSpec) -> None:
        assert self.queue is not None
        try:
            job = await self.queue.add(spec.name, dict(spec.run), self._options(spec))
        except GlideMQError as exc:
            self.record("add-error", "producer", n=spec.n, error=type(exc).__name__)
            return
        self._acked(spec, job, "add")

    async def _add_bulk(self, specs: list[JobSpec]) -> None:
        assert self.queue is not None
        items = [{"name": s.name, "data": dict(s.run), "opts": self._options(s)} for s in specs]
        try:
            added = await self.queue.add_bulk(items)
        except GlideMQError as exc:
            for s in specs:
                self.record("add-error", "producer", n=s.n, error=type(exc).__name__)
            return
        for s, job in zip(specs, added, strict=True):
            self._acked(s, job, "bulk")

    async def _add_flow(self, specs: list[JobSpec]) -> None:
        parent = next(s for s in specs if s.parent)
        kids = [s for s in specs if not s.parent]
        tree = FlowJob(
            parent.name,
            QUEUE,
            dict(parent.run),
            self._options(parent),
            children=[FlowJob(k.name, QUEUE, dict(k.run), self._options(k)) for k in kids],
        )
        producer = FlowProducer(connection=self.options(self.producer, self.producer_clock))
        try:
            node = await producer.add(tree)
        except GlideMQError as exc:
            for s in specs:
                self.record("add-error", "producer", n=s.n, error=type(exc).__name__)
            return
        finally:
            await producer.close()
        for k, child in zip(kids, node.children, strict=True):
            self._acked(k, child.job, "flow")
        self._acked(parent, node.job, "flow")
        self.jobs[parent.name].children = [c.job.id for c in node.children]
        self.record(
            "flow", "producer", node.job.id, children=",".join(c.job.id for c in node.children)
        )

    def _signal(self, job_id: str) -> None:
        self.producer.spawn(self._send_signal(job_id))

    async def _send_signal(self, job_id: str) -> None:
        assert self.queue is not None
        try:
            result = await self.queue.signal(job_id, "go")
        except GlideMQError as exc:
            self.record("signal-error", "producer", job_id, error=type(exc).__name__)
            self.loop.call_later(0.5, self._signal, job_id, context=self._server_ctx)
            return
        self.record("signal", "producer", job_id, result=result)

    # -- actions -------------------------------------------------------------------------

    def _act(self, action: Action) -> None:
        if action.kind in ("pause-worker", "resume-worker", "close-worker"):
            slot = self.slots[action.target]
            if slot.process.state.value == "running" and slot.worker is not None:
                slot.process.spawn(self._worker_act(slot, action))
            return
        self.producer.spawn(self._queue_act(action))

    async def _worker_act(self, slot: WorkerSlot, action: Action) -> None:
        worker = slot.worker
        assert worker is not None
        self.record("act", slot.consumer, kind=action.kind)
        if action.kind == "pause-worker":
            slot.paused = True
            worker.pause()
        elif action.kind == "resume-worker":
            slot.paused = False
            worker.resume()
        else:
            slot.closing = True
            await worker.close()
            self.record("closed", slot.consumer)
            if slot.process.alive:
                self.loop.kill(slot.process)
                self.network.drop(slot.process)
                self.loop.call_later(0.3, self._respawn, slot, context=self._server_ctx)

    async def _queue_act(self, action: Action) -> None:
        assert self.queue is not None and self.view is not None
        kind, q = action.kind, self.queue
        rec = self.jobs.get(action.target)
        if kind in ("group-concurrency", "global-concurrency"):
            self.record("act-sent", "producer", kind=kind, target=action.target, value=action.value)
        try:
            if kind == "pause-queue":
                await q.pause()
            elif kind == "resume-queue":
                await q.resume()
            elif kind == "group-concurrency":
                await q.set_group_concurrency(action.target, action.value)
            elif kind == "global-concurrency":
                await q.set_global_concurrency(action.value)
            elif rec is None:
                return  # the job's add was not acknowledged (yet)
            elif kind == "remove":
                await q.remove(rec.id)
            elif kind in ("edit", "dash-edit"):
                await self._edit(kind, rec)
                return
        except GlideMQError as exc:
            self.record(
                "act-error", "producer", rec.id if rec else "", kind=kind, error=type(exc).__name__
            )
            return
        self.record(
            "act",
            "producer",
            rec.id if rec else "",
            kind=kind,
            target=action.target,
            value=action.value,
        )

    async def _edit(self, kind: str, rec: JobRecord) -> None:
        assert self.queue is not None and self.view is not None
        version = rec.version + 1
        data = dict(rec.spec.run, v=version)
        self.record("edit-sent", "producer", rec.id, v=version, how=kind)
        if kind == "dash-edit":
            result = await admin_actions.update_data(self.view, rec.id, data)
            if not result.ok:
                self.record("edit-refused", "producer", rec.id, v=version, detail=result.detail)
                return
        else:
            job = await self.queue.get_job(rec.id)
            if job is None:
                return
            try:
                await job.update_data(data)
            except JobStateError as exc:  # a worker fetched it, or it finished
                self.record("edit-refused", "producer", rec.id, v=version, detail=str(exc))
                return
        rec.version = version
        self.record("edit", "producer", rec.id, v=version, how=kind)

    # -- faults --------------------------------------------------------------------------

    def _fault(self, fault: Fault) -> None:
        kind = fault.kind
        clock: ProcessClock | None
        if fault.target == "producer":
            process, clock = self.producer, self.producer_clock
        elif fault.target in self.slots:
            slot = self.slots[fault.target]
            if not slot.process.alive:
                return
            process, clock = slot.process, slot.clock
        else:
            process, clock = self.producer, None
        who = process.name if fault.target != "server" else "server"
        self.record("fault", who, kind=kind, length=fault.length_s, size=fault.size)
        now = self.now()
        if kind == "crash":
            self.crash(self.slots[fault.target], "fault")
        elif kind == "freeze":
            self.freeze(self.slots[fault.target], fault.length_s)
        elif kind == "slow":
            self.network.slow(process.name, now + fault.length_s, fault.size)
        elif kind == "lossy":
            self.network.lossy(process.name, now + fault.length_s, fault.size)
        elif kind == "reset":
            self.network.reset(process)
        elif kind == "restart":
            self.network.restart_server(fault.length_s)
        elif kind == "stall":
            self.network.stall_server(fault.length_s)
        elif kind == "clock" and clock is not None:
            clock.offset_ms += int(fault.size)
            self.loop.call_later(
                fault.length_s,
                self._step_back,
                clock,
                int(fault.size),
                who,
                context=self._server_ctx,
            )

    def _step_back(self, clock: ProcessClock, step: int, who: str) -> None:
        clock.offset_ms -= step
        self.record("clock-back", who)

    # -- the run -------------------------------------------------------------------------

    def _schedule(self) -> None:
        plan = self.plan
        batches: dict[int, list[JobSpec]] = {}
        flows: dict[int, list[JobSpec]] = {}
        for spec in plan.jobs:
            if spec.how == "bulk":
                batches.setdefault(spec.batch, []).append(spec)
            elif spec.how == "flow":
                flows.setdefault(spec.flow, []).append(spec)
            else:
                self.at(spec.at_s, self._spawn_add, self._add, spec)
        for specs in batches.values():
            self.at(specs[0].at_s, self._spawn_add, self._add_bulk, specs)
        for specs in flows.values():
            self.at(specs[0].at_s, self._spawn_add, self._add_flow, specs)
        for action in plan.actions:
            self.at(action.at_s, self._act, action)
        for fault in plan.faults:
            self.at(fault.at_s, self._fault, fault)

    def _spawn_add(self, fn: Any, arg: Any) -> None:
        self.producer.spawn(fn(arg))

    def quiet_time(self) -> float:
        """When the last fault and action are over (s into the run)."""
        ends = [self.s.faults_until_s]
        ends += [f.at_s + f.length_s for f in self.plan.faults]
        ends += [a.at_s for a in self.plan.actions]
        ends += [j.at_s for j in self.plan.jobs]
        return max(ends) + 0.5

    def liveness_bound(self) -> float:
        """How long after the faults every job must be finished (s)."""
        s = self.s
        lock, scan = s.lock_ms / 1000, s.stalled_ms / 1000
        longest = 0.0
        work = {"": 0.0, "g1": 0.0}  # run time of every try: all jobs, the group's
        for j in self.plan.jobs:
            attempts = int(j.opts.get("attempts", 1))
            backoff = int(j.opts.get("backoff", {}).get("delay", 0)) / 1000
            wait = int(j.opts.get("delay", 0)) / 1000 + int(j.run.get("s", 0)) / 1000
            longest = max(longest, attempts * (int(j.run["d"]) / 1000 + backoff) + wait)
            tries = attempts * int(j.run["d"]) / 1000
            work[""] += tries
            if j.opts.get("group_key") == "g1":
                work["g1"] += tries
        # a low concurrency in force at the end runs the jobs left one (or a few) at a time
        limit = {"": s.global_concurrency, "g1": GROUP_LIMITS["g1"]}
        for a in sorted(self.plan.actions, key=lambda a: a.at_s):
            if a.kind == "global-concurrency":
                limit[""] = a.value
            elif a.kind == "group-concurrency" and a.target in limit:
                limit[a.target] = a.value
        serial = max((work[k] / n for k, n in limit.items() if n > 0), default=0.0)
        return 10.0 + (s.max_stalled + 3) * (lock + scan + 1.0) + longest * 3 + serial * 2

    async def _quiet(self) -> None:
        """The faults are over: every process runs again and every job must finish."""
        self.quiet_at = self.now()
        self.record("quiet", "sim")
        for slot in self.slots.values():
            if slot.process.state.value == "frozen":
                self._thaw(slot, slot.process)
            if slot.clock is not None:
                slot.clock.offset_ms = 0
            if slot.process.alive and slot.worker is not None and slot.paused:
                slot.process.spawn(self._worker_act(slot, Action(-1, 0, "resume-worker")))
        self.producer_clock.offset_ms = 0
        assert self.queue is not None
        for attempt in range(20):
            try:
                await self.queue.resume()
                break
            except GlideMQError:
                await asyncio.sleep(0.2 * (attempt + 1))

    def unfinished(self) -> list[JobRecord]:
        """Acknowledged jobs not completed or failed (or removed) on the server."""
        out = []
        for rec in self.jobs.values():
            h = self.server.job_hash(self.keys.base + "job:" + rec.id)
            if h and h.get("state") not in ("completed", "failed"):
                out.append(rec)
        return out

    async def main(self) -> None:
        await self.producer.spawn(self._setup())
        for slot in self.slots.values():
            slot.process.spawn(self._start_worker(slot))
        self._schedule()
        await asyncio.sleep(self.t0 + self.quiet_time() - self.now())
        await self.producer.spawn(self._quiet())
        deadline = self.now() + self.liveness_bound()
        while self.now() < deadline and self.unfinished():  # noqa: ASYNC110 - virtual time
            await asyncio.sleep(_POLL_S)
        self.finished_at = self.now()
        self.record("end-of-run", "sim", unfinished=len(self.unfinished()))


def _summary(spec: JobSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("delay", "priority", "ordering_key", "group_key", "attempts", "at_most_once"):
        if key in spec.opts:
            out[key] = spec.opts[key]
    if "deduplication" in spec.opts:
        out["dedup"] = spec.opts["deduplication"]["id"]
    for key, value in spec.run.items():
        if key != "v":
            out[key] = value
    return out


def quiet_logs() -> dict[str, int]:
    """Silence glidemq's loggers below ERROR for a run; returns the old levels."""
    old = {}
    for name in ("glidemq", "glidemq.worker", "glidemq.queue"):
        logger = logging.getLogger(name)
        old[name] = logger.level
        logger.setLevel(logging.CRITICAL)
    return old
