"""The state of one in-memory queue and every transition of its jobs.

Each method is the counterpart of one function of the server library (glidemq/lua/) and keeps
its rules: the states, what a call returns for a missing or busy job, retention, events.
All calls run on the event loop thread, so each is atomic like an FCALL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import SerializerMismatchError
from ..keys import DEFAULT_PREFIX
from ..limit_options import RateLimit
from ..serialize import EVENT_VALUE_MAX_BYTES
from ..types import JobOptions
from . import budgets, flows, groups
from .clock import Clock
from .records import FINISHED, SHIFT, Event, JobRecord, Owner, ZSet
from .window import RateWindow

if TYPE_CHECKING:
    from ..scheduler import JobScheduler

__all__ = ["FINISHED", "SHIFT", "Event", "JobRecord", "QueueStore"]

_EVENTS_MAXLEN = 1000


class QueueStore:
    """One queue held in memory: jobs, the stream of waiting jobs, the scheduled set,
    the finished sets, deduplication entries, the pause flag and the events."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        prefix: str = DEFAULT_PREFIX,
        peers: Callable[[str], QueueStore] | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.prefix = prefix
        # the other queues of the same server and prefix (flows cross queues)
        self.peer: Callable[[str], QueueStore] = peers or (lambda other: self)
        self._waiters: list[asyncio.Future[None]] = []
        self.event_listeners: list[Callable[[Event], None]] = []
        self.workers: set[Owner] = set()  # started workers of this queue
        self._event_seq = 0  # never reset: event ids keep growing across obliterate
        self.reset()

    def reset(self) -> None:
        """Forget everything (obliterate)."""
        self.jobs: dict[str, JobRecord] = {}
        self.last_id = 0
        self.waiting: dict[str, str] = {}  # entry id -> job id, in stream order
        self.active: dict[str, str] = {}  # entry id -> job id, jobs held by workers
        self.scheduled = ZSet()
        self.finished = {"completed": ZSet(), "failed": ZSet(), "dlq": ZSet()}
        self.dedup: dict[str, tuple[str, int]] = {}
        self.paused = False
        self.serializer: str | None = None  # recorded by the first non-JSON queue or worker
        # limits (glidemq/testing/limits.py) and outcomes kept for add_and_wait
        self.max_waiting: int | None = None
        self.max_waiting_per_key: int | None = None
        self.concurrency = 0
        self.rate: RateLimit | None = None
        self.windows = {"queue": RateWindow(), "worker": RateWindow()}
        self.limit_until = 0
        self.metrics: dict[str, dict[int, int]] = {"completed": {}, "failed": {}}
        self.usage_buckets: dict[int, dict[str, float]] = {}  # epoch minute -> bucket fields
        self.job_streams: dict[str, list[tuple[str, bytes]]] = {}  # job id -> chunks
        self.budgets: dict[str, Any] = {}  # root job id -> MemoryBudget of its flow
        self.suspended: dict[str, float] = {}  # job id -> deadline (ms; inf: none)
        self.token_window: tuple[int, int] = (0, 0)  # token limiter: start, used
        self.watched: dict[str, int] = {}
        self.outcomes: dict[str, JobRecord] = {}
        self.results: dict[str, tuple[int, JobRecord]] = {}  # result cache: expiry, outcome
        self.events: deque[Event] = deque(maxlen=_EVENTS_MAXLEN)
        # groups, ordering keys and LIFO (groups.py), flows (flows.py), job schedulers
        self.groups: dict[str, groups.GroupState] = {}
        self.ordering: dict[str, int] = {}  # last sequence number of each ordering key
        self.ratelimited = ZSet()
        self.lifo: list[str] = []  # newest at the end
        self.waiting_children = ZSet()
        self.schedulers: dict[str, JobScheduler] = {}
        self._entry_ms = 0
        self._entry_seq = 0

    def claim_serializer(self, name: str, who: str) -> None:
        """As glidemq.wire.features.claim_serializer: record a non-JSON serializer first come,
        refuse a different one with SerializerMismatchError."""
        if name != "json" and self.serializer is None:
            self.serializer = name
        recorded = self.serializer or "json"
        if recorded != name:
            raise SerializerMismatchError(self.name, recorded, name, who)

    # -- change notification -------------------------------------------------------------

    def notify(self) -> None:
        """Wake everything waiting for a change of this queue (workers, finish waits)."""
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                with contextlib.suppress(RuntimeError):  # its event loop is gone
                    future.set_result(None)

    async def changed(self, timeout: float | None) -> None:
        """Return after the next change, or after `timeout` seconds."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, timeout)

    def emit(self, event: str, job_id: str | None, **fields: Any) -> None:
        """Append to the event log (the events stream of the real queue)."""
        self._event_seq += 1
        entry = (
            f"{self.clock.now_ms()}-{self._event_seq}",
            event,
            job_id,
            {k: str(v) for k, v in fields.items()},
        )
        self.events.append(entry)
        for listener in list(self.event_listeners):
            listener(entry)

    # -- placement -----------------------------------------------------------------------

    def _entry_id(self, now: int) -> str:
        if now > self._entry_ms:
            self._entry_ms, self._entry_seq = now, 0
        else:
            self._entry_seq += 1
        return f"{self._entry_ms}-{self._entry_seq}"

    def to_stream(self, rec: JobRecord, now: int) -> None:
        """Append the job to the stream: it is waiting."""
        entry = self._entry_id(now)
        self.waiting[entry] = rec.id
        rec.state, rec.sid = "waiting", entry

    def enqueue(self, rec: JobRecord, run_at: int, now: int) -> str:
        """Put a job where a worker finds it: the stream, or the scheduled set."""
        if run_at > now:
            self.scheduled.add(rec.id, rec.priority * SHIFT + run_at)
            rec.state = "delayed"
        elif rec.priority > 0:
            self.scheduled.add(rec.id, rec.priority * SHIFT + now)
            rec.state = "prioritized"
        else:
            self.to_stream(rec, now)
        self.notify()
        return rec.state

    def unlink_waiting(self, rec: JobRecord) -> None:
        """Take a job not yet running out of the stream, the scheduled set, the set of
        parents waiting for children or the suspended index."""
        if rec.state == "waiting":
            if rec.sid is not None:
                self.waiting.pop(rec.sid, None)
        elif rec.state in ("delayed", "prioritized"):
            self.scheduled.remove(rec.id)
        elif rec.state == "waiting-children":
            self.waiting_children.remove(rec.id)
        elif rec.state == "suspended":
            self.suspended.pop(rec.id, None)

    def forget(self, rec: JobRecord, outcome: str, reason: str | None) -> None:
        """A job that is not running leaves the queue (removed, revoked, drained, cleaned):
        its flow parents learn it ('removed', or 'failed' with `reason`), its group claim
        and its place in any wait set are given back."""
        now = self.clock.now_ms()
        if rec.parents and rec.state not in FINISHED:
            flows.notify(self, rec, outcome, reason, now)
        groups.forget(self, rec, now)
        self.unlink_waiting(rec)

    def delete(self, job_id: str) -> None:
        """Delete the job and its log (its place in any set is the caller's to clear)."""
        self.jobs.pop(job_id, None)

    # -- adding --------------------------------------------------------------------------

    def new_id(self, taken: Callable[[str], bool] = lambda i: False) -> str:
        """The next counter id not used by a job (nor `taken`, ids reserved by a flow)."""
        self.last_id += 1
        while str(self.last_id) in self.jobs or taken(str(self.last_id)):
            self.last_id += 1
        return str(self.last_id)

    def add(
        self, name: str, data: bytes, opts: JobOptions, now: int, custom_id: str | None = None
    ) -> str:
        """Add a job; returns its id, or 'duplicate' when the custom id exists.
        `custom_id` overrides `opts.job_id` (job schedulers)."""
        custom_id = custom_id or opts.job_id
        if custom_id:
            if custom_id in self.jobs:
                return "duplicate"
            if opts.result_ttl and self.cached_result(custom_id) is not None:
                return "duplicate"  # its outcome is still cached, as on the server
            job_id = custom_id
        else:
            job_id = self.new_id()
        wire = opts.to_wire()
        rec = JobRecord(
            job_id, name, data, wire, now, opts.attempts, opts.delay, opts.priority, "waiting"
        )
        if opts.ttl > 0:
            rec.expire_at = now + opts.ttl
        self.jobs[job_id] = rec
        groups.join(self, rec, opts, now)
        if opts.lifo and not opts.delay and not opts.priority:
            rec.lifo = True
            self.lifo.append(job_id)
            self.notify()
        else:
            self.enqueue(rec, now + opts.delay, now)
        if not wire.get("skipEvents"):
            self.emit("added", job_id, name=name)
        return job_id

    def dedup_check(self, dedup_id: str, ttl: int, mode: str, now: int, room: int | None) -> str:
        """Whether a job with this deduplication id may be added now: 'add', 'skipped', or
        'full' (`room`: places left under the queue's max waiting, None without a limit).
        Debounce replaces the previous job while it is delayed or prioritized."""
        entry = self.dedup.get(dedup_id)
        if entry is None:
            return "add"
        prev_id, prev_ts = entry
        prev = self.jobs.get(prev_id)
        prev_state = prev.state if prev is not None else None
        if mode == "simple":
            busy = prev_state is not None and prev_state not in FINISHED
        elif mode == "throttle":
            busy = now - prev_ts < ttl
        elif prev is not None and prev_state in ("delayed", "prioritized"):
            if room is not None and room + 1 <= 0:
                return "full"
            self.scheduled.remove(prev_id)
            groups.forget(self, prev, now)
            self.delete(prev_id)
            self.emit("removed", prev_id, reason="debounced")
            busy = False
        else:
            busy = prev_state is not None and prev_state not in FINISHED
        return "skipped" if busy else "add"

    # -- taking and finishing ------------------------------------------------------------

    def promote(self, now: int) -> None:
        """Move due delayed jobs of priority 0 and due rate-limited jobs to run; fail
        expired suspensions (the workers' promotion pass does both)."""
        for job_id in self.scheduled.by_score(0, now):
            self._move_to_stream(job_id, now)
        groups.promote_rate_limited(self, now)
        self.expire_suspended(now)

    def expire_suspended(self, now: int) -> int:
        """Fail suspended jobs whose deadline passed (wire.features.expire_suspended)."""
        due = [i for i, deadline in self.suspended.items() if deadline <= now]
        for job_id in due:
            del self.suspended[job_id]
            rec = self.jobs.get(job_id)
            if rec is not None and rec.state == "suspended":
                reason = "suspension timed out"
                if rec.suspend_reason:
                    reason += ": " + rec.suspend_reason
                self.final_fail(rec, reason, now, (-1, 0), True, False)
        if due:
            self.notify()
        return len(due)

    def _move_to_stream(self, job_id: str, now: int) -> None:
        self.scheduled.remove(job_id)
        rec = self.jobs.get(job_id)
        if rec is not None:
            self.to_stream(rec, now)

    def _due_bands(self, now: int, n: int) -> list[str]:
        """Prioritized jobs (and due delayed ones with a priority) in admission order."""
        out: list[str] = []
        for job_id in self.scheduled.ordered():
            if len(out) >= n:
                break
            score = self.scheduled.scores[job_id]
            if score >= SHIFT and score % SHIFT <= now:
                out.append(job_id)
        return out

    def next_due(self, now: int) -> int | None:
        """When the next scheduled job, rate-limited job or job scheduler not yet due
        becomes due, if any."""
        later = [s % SHIFT for s in self.scheduled.scores.values() if s % SHIFT > now]
        later += [s for s in self.ratelimited.scores.values() if s > now]
        later += [s.next_run for s in self.schedulers.values() if s.next_run > now]
        return min(later) if later else None

    def take(self, n: int, owner: Owner, now: int, emit: bool) -> list[JobRecord] | None:
        """Activate up to `n` jobs for `owner`: waiting ones in stream order, then due
        prioritized ones in priority order. None while the queue is paused."""
        if self.paused:
            return None
        out: list[JobRecord] = []
        while len(out) < n:
            short = n - len(out) - len(self.waiting)
            if short > 0:  # the stream runs short: LIFO jobs newest first, then priorities
                short -= groups.admit_lifo(self, short, now)
                for job_id in self._due_bands(now, short):
                    self._move_to_stream(job_id, now)
            if not self.waiting:
                break
            entry = next(iter(self.waiting))
            job_id = self.waiting.pop(entry)
            rec = self.jobs.get(job_id)
            if rec is None or rec.state != "waiting":
                continue
            if rec.budget is not None and rec.budget.exceeded:
                budgets.stop(self, rec, now, emit)
                continue
            if rec.group_key is not None and not groups.admit(self, rec, entry, now, emit):
                continue  # parked by its group (or dead-lettered)
            self.active[entry] = job_id
            rec.state, rec.processed_on, rec.sid, rec.owner = "active", now, entry, owner
            out.append(rec)
            if emit:
                self.emit("active", job_id)
        return out

    def leave_active(self, job_id: str, entry: str) -> JobRecord | str:
        """Take a job out of the active state: its record, or 'stale' when `entry` no longer
        holds it, or 'missing' when it was deleted meanwhile. The caller then calls
        `left_active` with the outcome."""
        if self.active.get(entry) != job_id:
            return "stale"
        del self.active[entry]
        rec = self.jobs.get(job_id)
        if rec is None:
            return "missing"
        rec.owner = None
        return rec

    def left_active(
        self, rec: JobRecord, outcome: str, now: int, value: bytes | str | None = None
    ) -> None:
        """What a job leaving the active state gives back: its group slot or turn, and
        (finished for good) the news to its flow parents. outcome: 'completed', 'failed',
        'retry', 'requeued', 'delayed' or 'waiting-children'."""
        if rec.group_key is not None:
            groups.release_on_leave(self, rec, outcome, now)
        if rec.parents and outcome in FINISHED:
            flows.notify(self, rec, outcome, value, now)

    def keep_failed(self, job_id: str, now: int, keep: tuple[int, int]) -> None:
        """Apply a failed job's retention `keep` (keepCount, keepAge) after it failed."""
        if keep[0] == 0:
            self.finished["failed"].remove(job_id)
            self.delete(job_id)
        else:
            self._retain("failed", now, *keep)

    def _retain(self, kind: str, now: int, keep_count: int, keep_age: int) -> None:
        zset = self.finished[kind]
        if keep_count > 0 and len(zset) > keep_count:
            for job_id in zset.ordered()[: min(len(zset) - keep_count, 1000)]:
                zset.remove(job_id)
                self.delete(job_id)
        if keep_age > 0:
            for job_id in zset.by_score(-(2**62), now - keep_age * 1000)[:1000]:
                zset.remove(job_id)
                self.delete(job_id)

    def _count(self, kind: str, now: int) -> None:
        minute = now // 60_000
        counts = self.metrics[kind]
        counts[minute] = counts.get(minute, 0) + 1

    def _keep_outcome(self, rec: JobRecord, now: int) -> None:
        # add_and_wait learns the outcome even when retention deletes the job at once.
        if rec.id in self.watched:
            self.outcomes[rec.id] = dataclasses.replace(rec, logs=[])
        rttl = rec.opts.get("resultTtl")
        if rttl:  # the result cache (JobOptions.result_ttl), whatever the retention
            self.results[rec.id] = (now + int(rttl), dataclasses.replace(rec, logs=[]))

    def cached_result(self, job_id: str) -> JobRecord | None:
        """The outcome kept for `job_id` by its result ttl, or None once it expired."""
        kept = self.results.get(job_id)
        if kept is None:
            return None
        if kept[0] <= self.clock.now_ms():
            del self.results[job_id]
            return None
        return kept[1]

    def complete(
        self, job_id: str, entry: str, rv: bytes, keep: tuple[int, int], now: int, emit: bool
    ) -> str:
        """Record a success: 'ok', or 'stale'/'missing' when the run no longer owns the job."""
        rec = self.leave_active(job_id, entry)
        if isinstance(rec, str):
            return rec
        self.left_active(rec, "completed", now, rv)
        rec.state, rec.returnvalue, rec.finished_on = "completed", rv, now
        self._count("completed", now)
        self._keep_outcome(rec, now)
        if keep[0] == 0:
            self.delete(job_id)
        else:
            self.finished["completed"].add(job_id, now)
            self._retain("completed", now, *keep)
        if emit and len(rv) <= EVENT_VALUE_MAX_BYTES:
            self.emit("completed", job_id, returnvalue=rv.decode())
        elif emit:  # as the library: a large value stays out of the event
            self.emit("completed", job_id, returnvalueBytes=str(len(rv)))
        self.notify()
        return "ok"

    def final_fail(
        self,
        rec: JobRecord,
        reason: str,
        now: int,
        keep: tuple[int, int],
        emit: bool,
        dead_letter: bool,
    ) -> None:
        """Fail `rec` for good with `reason`: count it, keep or drop it, dead-letter it."""
        rec.state, rec.failed_reason, rec.finished_on = "failed", reason, now
        self._count("failed", now)
        self._keep_outcome(rec, now)
        if dead_letter:
            rec.dead_letter = True
            self.finished["dlq"].add(rec.id, now)
        elif keep[0] == 0:
            self.delete(rec.id)
        else:
            self.finished["failed"].add(rec.id, now)
            self._retain("failed", now, *keep)
        if emit:
            self.emit("failed", rec.id, failedReason=reason)

    def fail(
        self,
        job_id: str,
        entry: str,
        reason: str,
        retry_delay: int,
        keep: tuple[int, int],
        dead_letter: bool,
        stack: str,
        now: int,
        emit: bool,
    ) -> str:
        """Record a failed try: 'retry' (scheduled again), 'failed', 'stale' or 'missing'."""
        rec = self.leave_active(job_id, entry)
        if isinstance(rec, str):
            return rec
        rec.attempts_made += 1
        if stack:
            rec.stacktrace = stack
        if retry_delay >= 0 and rec.attempts_made < rec.max_attempts and not rec.revoked:
            rec.failed_reason = reason
            self.left_active(rec, "retry", now)
            self.enqueue(rec, now + retry_delay, now)
            if emit:
                self.emit("retrying", job_id, failedReason=reason, attemptsMade=rec.attempts_made)
            return "retry"
        self.left_active(rec, "failed", now, reason)
        self.final_fail(rec, reason, now, keep, emit, dead_letter)
        self.notify()
        return "failed"

    def defer(self, job_id: str, entry: str) -> bool:
        """Hand a job its worker did not finish straight back to the stream."""
        rec = self.leave_active(job_id, entry)
        if isinstance(rec, str) or rec.state != "active":
            return False
        self.left_active(rec, "requeued", self.clock.now_ms())
        self.to_stream(rec, self.clock.now_ms())
        self.emit("waiting", job_id, reason="deferred")
        self.notify()
        return True

    def move_active_to_delayed(
        self, job_id: str, entry: str, run_at: int, now: int, step: str | None = None
    ) -> str:
        """A running job goes back to delayed without using an attempt; `step` (if given)
        is what its next run sees as `job.step`."""
        rec = self.leave_active(job_id, entry)
        if isinstance(rec, str):
            return rec
        self.left_active(rec, "delayed", now)
        if step:
            rec.step = step
        state = self.enqueue(rec, run_at, now)
        self.emit("delayed", job_id, delay=run_at - now)
        return state

    # -- single-job operations -----------------------------------------------------------

    def remove(self, job_id: str) -> str:
        """'1' removed, '0' unknown, 'ERR:ACTIVE' while running."""
        rec = self.jobs.get(job_id)
        if rec is None:
            return "0"
        if rec.state == "active":
            return "ERR:ACTIVE"
        self.forget(rec, "removed", None)
        for zset in self.finished.values():
            zset.remove(job_id)
        self.delete(job_id)
        self.emit("removed", job_id)
        self.notify()
        return "1"

    def revoke(self, job_id: str, now: int) -> str:
        """Fail a job not started yet ('revoked'); flag a running one ('flagged')."""
        rec = self.jobs.get(job_id)
        if rec is None:
            return "0"
        if rec.state in FINISHED:
            return "ERR:FINISHED"
        rec.revoked = True
        if rec.state == "active":
            self.emit("revoked", job_id, state="active")
            if rec.owner is not None:
                # the real worker learns of it at its next heartbeat
                rec.owner.abort_job(job_id)
            return "flagged"
        self.forget(rec, "failed", "revoked")
        self.final_fail(rec, "revoked", now, (-1, 0), True, False)
        self.notify()
        return "revoked"

    def change_priority(self, job_id: str, priority: int, now: int) -> str:
        rec = self.jobs.get(job_id)
        if rec is None:
            return "0"
        rec.priority = priority
        if rec.state == "delayed":
            old = self.scheduled.scores.get(job_id, now)
            self.scheduled.add(job_id, priority * SHIFT + old % SHIFT)
            return "delayed"
        if rec.state in ("waiting", "prioritized"):
            self.unlink_waiting(rec)
            return self.enqueue(rec, now, now)
        return "ERR:STATE"

    def change_delay(self, job_id: str, delay: int, now: int) -> str:
        rec = self.jobs.get(job_id)
        if rec is None:
            return "0"
        if rec.state != "delayed":
            return "ERR:STATE"
        self.scheduled.remove(job_id)
        rec.delay = delay
        return self.enqueue(rec, now + delay, now)

    def promote_job(self, job_id: str, now: int) -> str:
        rec = self.jobs.get(job_id)
        if rec is None:
            return "0"
        if rec.state != "delayed":
            return "ERR:STATE"
        self.scheduled.remove(job_id)
        rec.delay = 0
        state = self.enqueue(rec, now, now)
        self.emit("promoted", job_id)
        return state

    def update(
        self, job_id: str, *, data: bytes | None = None, progress: bytes | None = None
    ) -> bool:
        rec = self.jobs.get(job_id)
        if rec is None:
            return False
        if data is not None:
            rec.data = data
        if progress is not None:
            rec.progress = progress
            self.emit("progress", job_id, data=progress.decode())
        return True

    def log(self, job_id: str, lines: Iterable[str]) -> int:
        rec = self.jobs.get(job_id)
        if rec is None:
            return 0
        rec.logs.extend(lines)
        return len(rec.logs)
