"""Groups, ordering keys, group rate limits, token buckets and LIFO of an in-memory queue.

The rules are those of the server library's limit functions (lua/10_limits.lua: joinGroup,
admitGroupJob, passSlot, orderingDone, forgetJob, admitLifo): a job of a group is admitted
when a worker takes it, or parked (`group-waiting` while its group is full or an earlier job
of its ordering key has not finished, `rate-limited` while its group's window or bucket
says no); a slot freed goes straight to the group's first parked job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..limit_options import millitokens
from ..types import JobOptions
from .records import JobRecord, ZSet
from .window import RateWindow

if TYPE_CHECKING:
    from .store import QueueStore

__all__ = [
    "GroupState",
    "admit",
    "admit_lifo",
    "entry_score",
    "forget",
    "join",
    "promote_rate_limited",
    "release_on_leave",
    "take_parked",
]

_NO_REFILL_WAIT_MS = 60_000  # a bucket that never refills: look again now and then


@dataclass(slots=True)
class GroupState:
    """One group key: its settings, its slots, its turn (ordering keys) and its wait set."""

    max_concurrency: int = 1
    active: int = 0
    reserved: int = 0
    next_seq: int = 1
    rate_max: int = 0
    rate_duration: int = 0
    rate: RateWindow = field(default_factory=RateWindow)
    tb_capacity: int = 0  # millitokens
    tb_refill_rate: int = 0  # millitokens per second
    tb_tokens: int = 0
    tb_last: int = 0
    tb_remainder: int = 0
    parked: ZSet = field(default_factory=ZSet)  # group-waiting jobs
    done_early: set[int] = field(default_factory=set)  # seqs finished before their turn


def entry_score(entry: str) -> int:
    """A stream entry's place as a number, as the server scores parked jobs."""
    ms, _, seq = entry.partition("-")
    return int(ms) * 2048 + min(int(seq or 0), 2047)


# -- adding -------------------------------------------------------------------------------


def join(store: QueueStore, rec: JobRecord, opts: JobOptions, now: int) -> None:
    """Tie a new job to its group; the add restates the group's settings (last add wins)."""
    key = opts.ordering_key if opts.ordering_key is not None else opts.group_key
    if key is None:
        return
    concurrency = 1 if opts.ordering_key is not None else (opts.group_concurrency or 1)
    g = store.groups.setdefault(key, GroupState())
    g.max_concurrency = concurrency
    rate = opts.group_rate_limit
    if rate is not None:
        g.rate_max, g.rate_duration = rate.max, rate.duration
    elif g.rate_max:
        g.rate_max = g.rate_duration = 0
        g.rate.reset()
    bucket = opts.token_bucket
    if bucket is not None:
        if not g.tb_capacity:
            g.tb_tokens, g.tb_last, g.tb_remainder = millitokens(bucket.capacity), now, 0
        g.tb_capacity = millitokens(bucket.capacity)
        g.tb_refill_rate = millitokens(bucket.refill_rate)
    elif g.tb_capacity:
        g.tb_capacity = g.tb_refill_rate = g.tb_tokens = g.tb_last = g.tb_remainder = 0
    rec.group_key = key
    if concurrency == 1:
        seq = store.ordering.get(key, 0) + 1
        store.ordering[key] = seq
        rec.ordering_seq = seq
    if opts.cost is not None:
        rec.cost = millitokens(opts.cost)


# -- parking and waking ---------------------------------------------------------------------


def _park_in_group(store: QueueStore, rec: JobRecord, g: GroupState, score: int) -> None:
    g.parked.add(rec.id, score)
    rec.state, rec.sid = "group-waiting", None


def _park_rate_limited(store: QueueStore, rec: JobRecord, at: int) -> None:
    store.ratelimited.add(rec.id, at)
    rec.state, rec.sid = "rate-limited", None


def _wake(store: QueueStore, key: str, job_id: str, reserve: bool, now: int) -> bool:
    g = store.groups[key]
    if not g.parked.remove(job_id):
        return False
    rec = store.jobs.get(job_id)
    if rec is None:
        return False
    if reserve:
        rec.group_slot = True
        g.reserved += 1
    store.enqueue(rec, now, now)
    return True


def _fill_slots(store: QueueStore, key: str, g: GroupState, now: int) -> None:
    while g.active < g.max_concurrency and g.parked:
        if _wake(store, key, g.parked.ordered()[0], True, now):
            g.active += 1


def _pass_slot(store: QueueStore, key: str, now: int, unused: bool) -> None:
    g = store.groups.setdefault(key, GroupState())
    if unused and g.reserved > 0:
        g.reserved -= 1
    if g.active <= g.max_concurrency:
        while g.parked:
            if _wake(store, key, g.parked.ordered()[0], True, now):
                return  # the slot goes on to the woken job
    g.active = max(0, g.active - 1)
    g.reserved = min(g.reserved, g.active)


def _ordering_done(store: QueueStore, key: str, seq: int, now: int) -> None:
    g = store.groups.setdefault(key, GroupState())
    if seq <= 0 or seq < g.next_seq:
        return
    if seq > g.next_seq:
        g.done_early.add(seq)
        return
    g.next_seq += 1
    while g.next_seq in g.done_early:
        g.done_early.discard(g.next_seq)
        g.next_seq += 1
    due = g.parked.by_score(g.next_seq, g.next_seq)
    if due:
        _wake(store, key, due[0], False, now)


def _release(store: QueueStore, rec: JobRecord, finished: bool, now: int, unused: bool) -> None:
    key = rec.group_key
    if key is None:
        return
    if rec.ordering:
        if finished:
            _ordering_done(store, key, rec.ordering_seq, now)
    elif rec.group_slot:
        rec.group_slot = False
        _pass_slot(store, key, now, unused)


def release_on_leave(store: QueueStore, rec: JobRecord, outcome: str, now: int) -> None:
    """A running job leaves the active state: 'completed' / 'failed' (for good), or
    'retry', 'requeued', 'delayed', 'waiting-children' (it runs again). An ordering key
    stays with a job that runs again; a concurrency slot is given back on every exit."""
    _release(store, rec, outcome in ("completed", "failed"), now, False)


def forget(store: QueueStore, rec: JobRecord, now: int) -> None:
    """A job leaves the queue without finishing a run (removed, revoked, drained, cleaned,
    debounced): out of the LIFO list and the wait sets, its group claim given back."""
    if rec.state == "rate-limited":
        store.ratelimited.remove(rec.id)
    elif rec.state == "waiting" and rec.lifo and rec.sid is None and rec.id in store.lifo:
        store.lifo.remove(rec.id)
    if rec.group_key is None:
        return
    if rec.state == "group-waiting":
        store.groups[rec.group_key].parked.remove(rec.id)
    _release(store, rec, True, now, rec.state != "active")


# -- admission ------------------------------------------------------------------------------


def _dead_letter(store: QueueStore, rec: JobRecord, g: GroupState, now: int, emit: bool) -> None:
    reason = (
        f"cost {rec.cost / 1000:g} exceeds the capacity {g.tb_capacity / 1000:g} "
        f"of the token bucket of group {rec.group_key}"
    )
    rec.state, rec.failed_reason, rec.finished_on, rec.dead_letter = "failed", reason, now, True
    rec.sid = None
    store.finished["dlq"].add(rec.id, now)
    if emit:
        store.emit("failed", rec.id, failedReason=reason)
    _release(store, rec, True, now, True)


def admit(store: QueueStore, rec: JobRecord, entry: str, now: int, emit: bool) -> bool:
    """Whether a job of a group taken from the stream starts now. If not it is parked (or,
    when its cost can never be paid, dead-lettered). Charges the group's window and tokens."""
    key = rec.group_key
    assert key is not None
    g = store.groups.setdefault(key, GroupState())
    if rec.ordering:
        if rec.ordering_seq > g.next_seq:  # an earlier job of the key has not finished
            _park_in_group(store, rec, g, rec.ordering_seq)
            return False
    elif not rec.group_slot and (
        # parked jobs go first, and so do woken ones not started yet
        g.active >= g.max_concurrency or min(g.reserved, g.active) > 0 or g.parked
    ):
        _park_in_group(store, rec, g, entry_score(entry))
        if g.active < g.max_concurrency:
            _fill_slots(store, key, g, now)
        return False
    if g.rate_max > 0:
        left, wait = g.rate.room(g.rate_max, g.rate_duration, now)
        if left <= 0:
            _park_rate_limited(store, rec, now + wait)
            return False
    if g.tb_capacity > 0 and not _take_tokens(store, rec, g, now, emit):
        return False
    if g.rate_max > 0:
        g.rate.charge(g.rate_max, g.rate_duration, now, 1)
    if not rec.ordering and not rec.group_slot:
        g.active += 1
        rec.group_slot = True
    elif rec.group_slot and not rec.ordering:  # a reservation: the job runs on it
        g.reserved = max(0, g.reserved - 1)
    return True


def _take_tokens(store: QueueStore, rec: JobRecord, g: GroupState, now: int, emit: bool) -> bool:
    """Pay the job's cost from its group's token bucket (refilled up to now); if the bucket
    cannot pay it yet, park the job until it can (a cost above capacity: dead-letter it)."""
    cost = rec.cost or 1000
    if cost > g.tb_capacity:
        _dead_letter(store, rec, g, now, emit)
        return False
    tokens, last, rem = min(g.tb_capacity, g.tb_tokens), g.tb_last, g.tb_remainder
    if now > last:
        if g.tb_refill_rate > 0 and tokens < g.tb_capacity:
            elapsed = min(now - last, math.ceil(g.tb_capacity * 1000 / g.tb_refill_rate) + 1)
            raw = elapsed * g.tb_refill_rate + rem
            tokens, rem = min(g.tb_capacity, tokens + raw // 1000), raw % 1000
        if tokens >= g.tb_capacity:
            rem = 0
        last = now
    if tokens < cost:
        wait = _NO_REFILL_WAIT_MS
        if g.tb_refill_rate > 0:
            wait = max(1, math.ceil(((cost - tokens) * 1000 - rem) / g.tb_refill_rate))
        g.tb_tokens, g.tb_last, g.tb_remainder = tokens, last, rem
        _park_rate_limited(store, rec, now + wait)
        return False
    g.tb_tokens, g.tb_last, g.tb_remainder = tokens - cost, last, rem
    return True


def admit_lifo(store: QueueStore, n: int, now: int) -> int:
    """Move up to `n` LIFO jobs, newest first, to the stream; returns how many moved."""
    moved = 0
    while moved < n and store.lifo:
        rec = store.jobs.get(store.lifo.pop())
        if rec is not None and rec.state == "waiting" and rec.sid is None:
            store.to_stream(rec, now)
            moved += 1
    return moved


def promote_rate_limited(store: QueueStore, now: int) -> None:
    """Jobs whose group window opened or whose tokens refilled go back to run."""
    for job_id in store.ratelimited.by_score(-(2**62), now):
        store.ratelimited.remove(job_id)
        rec = store.jobs.get(job_id)
        if rec is not None and rec.state == "rate-limited":
            store.enqueue(rec, now, now)


def take_parked(store: QueueStore, now: int) -> list[str]:
    """Empty the LIFO list, the rate-limited set and every wait set (drain); returns the
    ids of the jobs that waited there, their group claims given back."""
    ids: list[str] = []
    for job_id in store.lifo:
        rec = store.jobs.get(job_id)
        if rec is not None and rec.state == "waiting" and rec.sid is None:
            ids.append(job_id)
    store.lifo.clear()
    ids += [i for i in store.ratelimited.ordered() if _in_state(store, i, "rate-limited")]
    store.ratelimited = ZSet()
    for g in store.groups.values():
        ids += [i for i in g.parked.ordered() if _in_state(store, i, "group-waiting")]
        g.parked = ZSet()
    for job_id in ids:
        rec = store.jobs[job_id]
        _release(store, rec, True, now, True)
    return ids


def _in_state(store: QueueStore, job_id: str, state: str) -> bool:
    rec = store.jobs.get(job_id)
    return rec is not None and rec.state == state
