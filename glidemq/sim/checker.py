"""The named invariants, checked against one world's history and its server's final state.

Each invariant is a function of the `Facts`; `INVARIANTS` names and describes them (the
same text as docs/SIMULATION.md). A violation names the invariant, the job and what was seen.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .facts import LOSES_REPLIES, TAKES_HOLD, Facts, Run, Violation
from .known import classify
from .plan import GROUP_LIMITS

if TYPE_CHECKING:
    from .history import Record
    from .world import World

__all__ = ["INVARIANTS", "Violation", "check"]

STALL_REASON = "job stalled more than allowable limit"


Check = Callable[["World", Facts], Iterator[Violation]]
INVARIANTS: dict[str, tuple[str, Check]] = {}


def invariant(name: str, text: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        INVARIANTS[name] = (text, fn)
        return fn

    return register


def _final(world: World, job: str) -> dict[str, str]:
    return world.server.job_hash(world.keys.base + "job:" + job)


@invariant(
    "lost-job",
    "every acknowledged add ends completed, failed with a reason, or still pending; none vanishes",
)
def _lost(world: World, f: Facts) -> Iterator[Violation]:
    for rec in world.jobs.values():
        h = _final(world, rec.id)
        if not h:
            if not f.server_events(rec.id, "removed"):
                yield Violation(
                    "lost-job", rec.id, world.finished_at - world.t0, "the job vanished"
                )
        elif h.get("state") == "failed" and not h.get("failedReason"):
            yield Violation("lost-job", rec.id, 0.0, "failed without a reason")


@invariant(
    "rerun-without-loss",
    "a job starts again only after its previous run ended on the "
    "server (failure recorded, suspended, handed back) or was taken back by stall "
    "recovery",
)
def _rerun(world: World, f: Facts) -> Iterator[Violation]:
    for job, runs in f.runs_of.items():
        for prev, run in itertools.pairwise(runs):
            if not f.ended_between(job, prev.start, run.start):
                yield Violation(
                    "rerun-without-loss",
                    job,
                    run.start,
                    f"run {run.token} on {run.worker} started while run {prev.token} "
                    f"on {prev.worker} (from {prev.start:.3f}s) had not ended",
                )


@invariant(
    "reclaimed-from-live-worker",
    "stall recovery takes a job back only from a worker "
    "that crashed, froze, closed or suffered a connection fault",
)
def _reclaimed(world: World, f: Facts) -> Iterator[Violation]:
    margin = 2 * f.lock_s + f.request_timeout_s + 1.0
    for job, reclaims in f.reclaims_of.items():
        for c in reclaims:
            owner = str(c.info.get("owner", ""))
            base = owner.removesuffix(":wake")
            if not owner:
                continue
            dead = f.dead_at.get(base)
            if dead is not None and dead <= c.t:
                continue
            if (base, str(c.info.get("entry"))) in f.stranded:
                continue  # the reply that delivered it never reached the worker
            kinds = TAKES_HOLD | {"timeout"} if owner != base else TAKES_HOLD
            since = min(c.t - margin, f.activated_before(job, c.t))  # it held it from then
            if f.faulted(base, since, c.t, kinds):
                continue
            yield Violation(
                "reclaimed-from-live-worker",
                job,
                c.t,
                f"taken back from {owner}, which suffered no fault",
            )


@invariant(
    "start-without-hold",
    "a run starts only while the server has the job active in "
    "that worker's pending list (its lease is real)",
)
def _hold(world: World, f: Facts) -> Iterator[Violation]:
    for run in f.runs:
        if run.holder != run.worker or run.state != "active":
            yield Violation(
                "start-without-hold",
                run.job,
                run.start,
                f"run {run.token} on {run.worker}: the server has entry "
                f"{run.entry} held by {run.holder}, job {run.state or 'missing'}",
            )


@invariant(
    "tries-overlap",
    "a worker starts a job's next try only after it recorded the previous try's failure",
)
def _tries(world: World, f: Facts) -> Iterator[Violation]:
    for job, runs in f.runs_of.items():
        for i, run in enumerate(runs):
            for prev in runs[:i]:
                if prev.worker != run.worker or not prev.failed or prev.end is None:
                    continue
                if prev.recorded is not None and prev.recorded <= run.start:
                    continue
                if f.reclaimed_between(job, prev.start, run.start) is not None:
                    continue
                if f.faulted(run.worker, prev.end, run.start, LOSES_REPLIES):
                    continue  # its failure's reply may have been lost or refused as stale
                yield Violation(
                    "tries-overlap",
                    job,
                    run.start,
                    f"run {run.token} started on {run.worker} before it recorded "
                    f"the failure of run {prev.token}",
                )


@invariant(
    "unrecorded-outcome",
    "a worker reports (its completed / failed event) every "
    "outcome of its runs that the server recorded, unless it crashed, closed or a "
    "connection fault took the reply",
)
def _unrecorded(world: World, f: Facts) -> Iterator[Violation]:
    grace = 4 * f.request_timeout_s + 1.0
    for job, runs in f.runs_of.items():
        for i, run in enumerate(runs):
            if run.end is None or run.recorded is not None or run.outcome == "cancelled":
                continue
            if run.end > world.finished_at - world.t0 - grace:
                continue  # the run ended as the simulation did
            upto = runs[i + 1].start if i + 1 < len(runs) else float("inf")
            names = ("completed",) if run.outcome == "ok" else ("retrying", "failed")
            stored = [e for e in f.server_events(job, *names) if run.end <= e.t <= upto]
            if not stored or _by_stall_recovery(str(stored[0].info.get("failedReason", ""))):
                continue
            end = world.finished_at - world.t0
            if f.frozen_until_death(run.worker, stored[0].t, end):
                continue  # frozen before the reply could be read, until the run was over
            dead = f.dead_at.get(run.worker)
            if dead is not None and dead <= stored[0].t + grace:
                continue
            if dead is not None and f.frozen_until_death(run.worker, stored[0].t + grace, dead):
                continue  # frozen before the reply could be read, killed before the thaw
            if f.faulted(run.worker, run.end, stored[0].t + grace, LOSES_REPLIES):
                continue
            yield Violation(
                "unrecorded-outcome",
                job,
                stored[0].t,
                f"the server recorded run {run.token}'s {stored[0].info['event']}, "
                f"but {run.worker} never reported it",
            )


def _by_stall_recovery(reason: str) -> bool:
    """Whether a failure reason is stall recovery's, not a worker's recorded outcome: the
    stall limit, an at-most-once job's interrupted run, the bound of uncharged reclaims."""
    return reason.startswith(("job stalled", "job was taken")) or reason == "interrupted"


@invariant(
    "at-most-once",
    "an at-most-once job never starts again after a run of it was "
    "interrupted: only a recorded failure (a retry) or a signal runs it again",
)
def _amo(world: World, f: Facts) -> Iterator[Violation]:
    for job, runs in f.runs_of.items():
        if not f.info(job, "at_most_once"):
            continue
        for prev, run in itertools.pairwise(runs):
            again = [
                e
                for e in f.server_events(job, "retrying", "suspended")
                if prev.start < e.t <= run.start
            ]
            if not again:
                yield Violation(
                    "at-most-once",
                    job,
                    run.start,
                    f"run {run.token} on {run.worker} started after run "
                    f"{prev.token} on {prev.worker} was interrupted",
                )


_STOPS = frozenset({"crash", "freeze"})


def _stalled_runs(f: Facts, job: str) -> int:
    """Reclaims of `job` that took back a run which had started since the previous one, or a
    start the server had recorded (not held) for a worker that crashed or froze before it
    began: the server cannot tell that from a job that stops its worker as it starts, and
    charges it so that such a job still fails after max_stalled_count + 1 runs."""
    n, last = 0, float("-inf")
    for c in f.reclaims_of.get(job, []):
        if any(last < r.start <= c.t for r in f.runs_of.get(job, [])) or _stopped_first(f, c):
            n += 1
        last = c.t
    return n


def _stopped_first(f: Facts, c: Record) -> bool:
    """Whether reclaim `c` took a recorded start from a worker that crashed or froze between
    the job's activation and the reclaim."""
    if c.info.get("start", "recorded") == "held":
        return False
    owner = str(c.info.get("owner", "")).removesuffix(":wake")
    if not owner:
        return False
    since = f.activated_before(c.job, c.t)
    dead = f.dead_at.get(owner)
    return (dead is not None and since <= dead <= c.t) or f.faulted(owner, since, c.t, _STOPS)


@invariant(
    "stall-limit",
    "a job fails by the stall limit only after max_stalled_count + 1 of its runs were lost "
    "after they started, or after the server had recorded their start for a worker that "
    "crashed or froze before it began",
)
def _stall_limit(world: World, f: Facts) -> Iterator[Violation]:
    need = world.s.max_stalled + 1
    for rec in world.jobs.values():
        h = _final(world, rec.id)
        if h.get("state") == "failed" and h.get("failedReason") == STALL_REASON:
            lost = _stalled_runs(f, rec.id)
            if lost < need:
                yield Violation(
                    "stall-limit",
                    rec.id,
                    0.0,
                    f"failed by the stall limit after {lost} lost started runs "
                    f"({len(f.runs_of.get(rec.id, []))} starts; the limit needs "
                    f"{need})",
                )


def _activated(f: Facts, run: Run) -> float:
    """When the server last activated `run`'s job before the run began (its start, when
    the history has no activation)."""
    before = [e.t for e in f.server_events(run.job, "active") if e.t <= run.start]
    return max(before) if before else run.start


def _over(f: Facts, runs: list[Run], run: Run, limit: int) -> int:
    """How many of `runs` other than `run` are live when `run` starts, if that reaches
    `limit` (0 when it does not)."""
    live = sum(1 for r in runs if r is not run and f.live(r, run.start))
    return live if limit and live >= limit else 0


@invariant("worker-concurrency", "a worker never runs more jobs at once than its concurrency")
def _worker_concurrency(world: World, f: Facts) -> Iterator[Violation]:
    by_worker: dict[str, list[Run]] = defaultdict(list)
    for run in f.runs:
        by_worker[run.worker].append(run)
    for runs in by_worker.values():
        for run in runs:
            busy = sum(
                1
                for r in runs
                if r is not run and r.start <= run.start and (r.end is None or r.end > run.start)
            )
            if busy >= world.s.concurrency:
                yield Violation(
                    "worker-concurrency",
                    run.job,
                    run.start,
                    f"{run.worker} started it with {busy} running",
                )


@invariant(
    "global-concurrency",
    "a start never exceeds the queue's global concurrency in "
    "force when its job was fetched (a change applies from the next fetch)",
)
def _global_concurrency(world: World, f: Facts) -> Iterator[Violation]:
    for run in f.runs:
        fetched = f.activated_before(run.job, run.start)
        limit = f.limit("global", fetched)
        live = _over(f, f.runs, run, limit)
        if live:
            yield Violation(
                "global-concurrency",
                run.job,
                run.start,
                f"started with {live} running, limit {limit}",
            )


@invariant(
    "group-concurrency",
    "a group's concurrency is never exceeded by a start, and a job the "
    "server activated after a change returned obeys the new limit",
)
def _group_concurrency(world: World, f: Facts) -> Iterator[Violation]:
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in f.runs:
        key = f.info(run.job, "group_key")
        if key:
            groups[str(key)].append(run)
    for key, runs in groups.items():
        for run in runs:
            # The group's slot is taken when the server activates the job: a job activated
            # before a change was applied keeps the limit of then, even if its worker starts
            # it after the change returned.
            limit = f.limit(key, _activated(f, run))
            live = _over(f, runs, run, limit)
            if live:
                yield Violation(
                    "group-concurrency",
                    run.job,
                    run.start,
                    f"group {key}: started with {live} running, limit {limit}",
                )


@invariant(
    "ordering",
    "jobs of one ordering key start one at a time, each only after every "
    "job of the key added before it finished",
)
def _ordering(world: World, f: Facts) -> Iterator[Violation]:
    keyed: dict[str, list[str]] = defaultdict(list)
    for job, add in f.adds.items():
        if add.info.get("ordering_key"):
            keyed[str(add.info["ordering_key"])].append(job)
    for key, jobs in keyed.items():
        jobs.sort(key=int)
        done: dict[str, float] = {}
        for job in jobs:
            ends = f.server_events(job, "completed", "failed", "removed", "revoked")
            if ends:
                done[job] = ends[0].t
        for i, job in enumerate(jobs):
            for run in f.runs_of.get(job, []):
                for earlier in jobs[:i]:
                    if done.get(earlier, float("inf")) > run.start:
                        yield Violation(
                            "ordering",
                            job,
                            run.start,
                            f"key {key}: started before job {earlier} finished",
                        )
                        break


@invariant("stale-edit", "an acknowledged edit is the data of every run that starts after it")
def _edits(world: World, f: Facts) -> Iterator[Violation]:
    for job, edits in f.edits.items():
        for run in f.runs_of.get(job, []):
            wanted = max((v for t, v in edits if t < run.start), default=0)
            if run.version < wanted:
                yield Violation(
                    "stale-edit",
                    job,
                    run.start,
                    f"run {run.token} saw data v{run.version}, edit v{wanted} was "
                    f"acknowledged before it started",
                )


@invariant(
    "rate-limit",
    "at most max jobs are activated by the server in any window of the "
    "global rate limit's duration (a processor starts a moment after its activation; "
    "windows with a process's clock stepped are left out)",
)
def _rate(world: World, f: Facts) -> Iterator[Violation]:
    if world.s.rate is None:
        return
    most, ms = world.s.rate
    span = ms / 1000
    times = sorted(
        e.t for es in f.events_of.values() for e in es if e.info.get("event") == "active"
    )
    for t in times:
        n = f.count_in(times, t, t + span)
        if n > most and not f.skewed(t - span, t + 2 * span):
            yield Violation(
                "rate-limit", "", t, f"{n} activations in {ms} ms from {t:.3f}s (max {most})"
            )
            return


@invariant("flow-order", "a flow parent starts only after all its children completed")
def _flows(world: World, f: Facts) -> Iterator[Violation]:
    for rec in world.jobs.values():
        if not rec.children:
            continue
        for run in f.runs_of.get(rec.id, []):
            for child in rec.children:
                done = f.server_events(child, "completed")
                if not done or done[0].t > run.start:
                    yield Violation(
                        "flow-order",
                        rec.id,
                        run.start,
                        f"parent started before child {child} completed",
                    )
                    break


@invariant(
    "stale-completion", "no completion is accepted from a run whose job stall recovery took back"
)
def _stale_completion(world: World, f: Facts) -> Iterator[Violation]:
    if world.app is not None:
        return  # a user's processor returns its own values: the run is not known
    for rec in world.jobs.values():
        done = f.server_events(rec.id, "completed")
        if not done:
            continue
        try:
            token = int(json.loads(_final(world, rec.id).get("returnvalue", "{}"))["run"])
        except (ValueError, KeyError, TypeError):
            continue
        run = f.by_token.get(token)
        if run is None:
            continue
        taken = f.reclaimed_between(rec.id, run.start, done[0].t)
        if taken is not None:
            yield Violation(
                "stale-completion",
                rec.id,
                done[0].t,
                f"run {token} on {run.worker} completed it after stall recovery "
                f"took it back at {taken.t:.3f}s",
            )


@invariant(
    "completed-twice",
    "a job completes at most once and never starts after it completed or failed for good",
)
def _twice(world: World, f: Facts) -> Iterator[Violation]:
    for job in list(f.events_of):
        done = f.server_events(job, "completed", "failed")
        completed = [e for e in done if e.info.get("event") == "completed"]
        if len(completed) > 1:
            yield Violation("completed-twice", job, completed[1].t, "completed twice")
        if done:
            late = [r for r in f.runs_of.get(job, []) if r.start > done[0].t]
            if late:
                yield Violation(
                    "completed-twice",
                    job,
                    late[0].start,
                    f"started after it {done[0].info.get('event')}",
                )


@invariant(
    "poison-job",
    "a job that crashes its worker on every start is failed after "
    "max_stalled_count + 1 started runs and never started again (its neighbours "
    "complete)",
)
def _poison(world: World, f: Facts) -> Iterator[Violation]:
    need = world.s.max_stalled + 1
    if world.app is not None:
        return  # a user's processor does not crash its worker on purpose
    for rec in world.jobs.values():
        if not rec.spec.run.get("x"):
            continue
        runs = f.runs_of.get(rec.id, [])
        if len(runs) > need:
            yield Violation(
                "poison-job",
                rec.id,
                runs[need].start,
                f"started {len(runs)} times (max_stalled_count + 1 = {need})",
            )
        state = _final(world, rec.id).get("state")
        if state and state != "failed":
            yield Violation("poison-job", rec.id, 0.0, f"ended {state}, not failed")


@invariant(
    "liveness",
    "once the faults stop, every job reaches completed or failed within "
    "the bound (none stays waiting, delayed, active or held for ever)",
)
def _liveness(world: World, f: Facts) -> Iterator[Violation]:
    for rec in world.unfinished():
        state = _final(world, rec.id).get("state", "?")
        yield Violation(
            "liveness",
            rec.id,
            world.finished_at - world.t0,
            f"still {state} {world.finished_at - world.quiet_at:.1f}s after the faults stopped",
        )


def check(world: World, only: set[str] | None = None) -> list[Violation]:
    """Every violation of the invariants (or of those named in `only`) in `world`."""
    initial = {"global": world.s.global_concurrency, **GROUP_LIMITS}
    facts = Facts.of(world.history, world.s.lock_ms / 1000, world.s.request_timeout_s, initial)
    out: list[Violation] = []
    for name, (_, fn) in INVARIANTS.items():
        if only is None or name in only:
            out.extend(fn(world, facts))
    if any(r.kind == "deadlock" for r in world.history):
        out.append(Violation("liveness", "", world.finished_at - world.t0, "the loop deadlocked"))
    return classify(out, facts)
