"""Queue-wide limits of an in-memory queue: backpressure (max waiting), global concurrency,
rate windows (the queue's and the workers' limiters) and pauses by `rate_limit`, with the
rules of the server library; and when a queue counts as idle under them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..limit_options import RateLimit
from .store import SHIFT, QueueStore

if TYPE_CHECKING:
    from ..types import JobOptions

__all__ = [
    "allowance",
    "charge",
    "group_waiting",
    "hand_back",
    "idle",
    "key_full",
    "limit_for",
    "room",
]

# states of a job that has not started yet (what the per-key limit counts)
_NOT_STARTED = frozenset(
    {"waiting", "delayed", "prioritized", "group-waiting", "rate-limited", "waiting-children"}
)

_CONCURRENCY_POLL_MS = 50  # as the server: ask again after this when concurrency is used up


def room(store: QueueStore) -> int | None:
    """Places left under `set_max_waiting` for jobs not started yet; None without a limit."""
    if store.max_waiting is None:
        return None
    parked = len(store.lifo) + len(store.ratelimited) + group_waiting(store)
    return store.max_waiting - len(store.waiting) - len(store.scheduled) - parked


def key_full(store: QueueStore, opts: JobOptions) -> bool:
    """Whether the job's ordering or group key already holds `set_max_waiting_per_key` jobs
    not started yet."""
    key = opts.ordering_key if opts.ordering_key is not None else opts.group_key
    if key is None or store.max_waiting_per_key is None:
        return False
    held = sum(1 for r in store.jobs.values() if r.group_key == key and r.state in _NOT_STARTED)
    return held >= store.max_waiting_per_key


def group_waiting(store: QueueStore) -> int:
    """Jobs parked while their group is busy or their ordering key's turn has not come."""
    return sum(len(g.parked) for g in store.groups.values())


def allowance(
    store: QueueStore, count: int, now: int, limiter: RateLimit | None
) -> tuple[int, int]:
    """How many jobs a fetch of `count` may start now, and when 0, the ms to wait."""
    if store.limit_until:
        if store.limit_until > now:
            return 0, store.limit_until - now
        store.limit_until = 0
    for limit, window in ((store.rate, store.windows["queue"]), (limiter, store.windows["worker"])):
        if limit is None:
            continue
        left, wait = window.room(limit.max, limit.duration, now)
        if left <= 0:
            return 0, wait
        count = min(count, left)
    if store.concurrency > 0:
        if len(store.active) >= store.concurrency:
            return 0, _CONCURRENCY_POLL_MS
        count = min(count, store.concurrency - len(store.active))
    return count, 0


def charge(store: QueueStore, used: int, now: int, limiter: RateLimit | None) -> None:
    """Count `used` started jobs against the rate windows in force."""
    if used <= 0:
        return
    for limit, window in ((store.rate, store.windows["queue"]), (limiter, store.windows["worker"])):
        if limit is not None:
            window.charge(limit.max, limit.duration, now, used)


def limit_for(store: QueueStore, ms: int, now: int) -> None:
    """No worker of the queue starts a job for `ms` (Worker.rate_limit)."""
    if ms > 0 and now + ms > store.limit_until:
        store.limit_until = now + ms
    store.notify()


def hand_back(store: QueueStore, job_id: str, entry: str, delay: int, now: int) -> str:
    """A processor raised RateLimitError: the job goes back to the stream without using an
    attempt, and the queue stops starting jobs for `delay` ms. 'ok', 'stale' or 'missing'."""
    limit_for(store, delay, now)
    rec = store.leave_active(job_id, entry)
    if isinstance(rec, str):
        return rec
    store.left_active(rec, "requeued", now)
    store.to_stream(rec, now)
    store.emit("waiting", job_id, reason="rate-limited")
    store.notify()
    return "ok"


def idle(store: QueueStore, now: int) -> bool:
    """Nothing runs and nothing could start now: no job is active, and no job is runnable
    or no worker would take one (none started, all paused, queue paused, limits in force)."""
    if store.active:
        return False
    if store.paused:
        return True
    takers = [w for w in store.workers if w.is_running() and not w.is_paused()]
    if not any(allowance(store, 1, now, w.opts.limiter)[0] > 0 for w in takers):
        return True
    if store.waiting or store.lifo:
        return False
    if any(s.next_run <= now for s in store.schedulers.values()):
        return False
    if any(s <= now for s in store.ratelimited.scores.values()):
        return False
    return not any(s % SHIFT <= now for s in store.scheduled.scores.values())
