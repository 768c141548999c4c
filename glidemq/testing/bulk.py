"""Operations on many jobs of an in-memory queue at once: retry, drain, clean, and the
reads behind counts and listings (the bulk functions of the server library)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from . import groups
from .limits import group_waiting
from .store import SHIFT, QueueStore

__all__ = ["clean", "counts", "drain", "job_ids", "redis_range", "retry_jobs", "search"]


def redis_range(items: list[str], start: int, stop: int) -> list[str]:
    """`items[start..stop]` with Valkey's inclusive, negative-from-the-end indices."""
    n = len(items)
    if start < 0:
        start = max(n + start, 0)
    if stop < 0:
        stop = n + stop
    stop = min(stop, n - 1)
    return [] if start > stop else items[start : stop + 1]


def retry_jobs(store: QueueStore, source: str, count: int, ids: Iterable[str], now: int) -> int:
    """Move finished jobs back to the queue with fresh attempts; returns how many."""
    zset = store.finished[source]
    wanted = list(ids) or zset.ordered()[:count]
    n = 0
    for job_id in wanted:
        if not zset.remove(job_id):
            continue
        rec = store.jobs.get(job_id)
        if rec is None:
            continue
        rec.attempts_made = rec.stalled_count = 0
        rec.finished_on = rec.processed_on = rec.returnvalue = None
        rec.failed_reason = rec.stacktrace = rec.expire_at = None
        rec.dead_letter = rec.revoked = False
        store.enqueue(rec, now, now)
        store.emit("waiting", job_id, reason="retried")
        n += 1
    return n


def drain(store: QueueStore, delayed: bool) -> int:
    now = store.clock.now_ms()
    removed = 0
    # LIFO, group-waiting and rate-limited jobs first, so none is woken into the stream
    for job_id in groups.take_parked(store, now):
        parked = store.jobs[job_id]
        if parked.parents:
            store.forget(parked, "removed", None)
        store.delete(job_id)
        removed += 1
    for job_id in list(store.waiting.values()):
        rec = store.jobs.get(job_id)
        if rec is not None and rec.state == "waiting":
            store.forget(rec, "removed", None)
            store.delete(job_id)
            removed += 1
    for job_id in store.scheduled.ordered():
        rec = store.jobs.get(job_id)
        if rec is None or rec.state == "prioritized" or (delayed and rec.state == "delayed"):
            store.scheduled.remove(job_id)
            if rec is not None:
                store.forget(rec, "removed", None)
            store.delete(job_id)
            removed += 1
    store.emit("drained", None)
    store.notify()
    return removed


def clean(store: QueueStore, state: str, older_than: int, limit: int) -> list[str]:
    removed: list[str] = []
    if state in store.finished:
        zset = store.finished[state]
        for job_id in zset.by_score(-(2**62), older_than)[:limit]:
            zset.remove(job_id)
            store.delete(job_id)
            removed.append(job_id)
    else:
        if state == "waiting":
            candidates = list(store.waiting.values())
        else:
            candidates = store.scheduled.ordered()
        for job_id in candidates:
            if len(removed) >= limit:
                break
            rec = store.jobs.get(job_id)
            if rec is not None and rec.state == state and rec.timestamp < older_than:
                store.forget(rec, "removed", None)
                store.delete(job_id)
                removed.append(job_id)
    if removed:
        store.emit("cleaned", None, count=len(removed), state=state)
        store.notify()
    return removed


def counts(store: QueueStore, now: int) -> dict[str, Any]:
    """The fields of JobCounts: LIFO and group-waiting jobs count as waiting, rate-limited
    ones as delayed, as on the server."""
    prioritized = sum(1 for s in store.scheduled.scores.values() if s >= SHIFT and s % SHIFT <= now)
    f = store.finished
    parked = group_waiting(store)
    return {
        "waiting": len(store.waiting) + len(store.lifo) + parked,
        "active": len(store.active),
        "delayed": len(store.scheduled) - prioritized + len(store.ratelimited),
        "prioritized": prioritized,
        "completed": len(f["completed"]),
        "failed": len(f["failed"]),
        "dead_letter": len(f["dlq"]),
        "paused": store.paused,
        "waiting_children": len(store.waiting_children),
        "group_waiting": parked,
        "rate_limited": len(store.ratelimited),
        "suspended": len(store.suspended),
    }


def job_ids(store: QueueStore, state: str, start: int, stop: int) -> list[str]:
    """Ids in `state`: finished sets newest first, the others in run order."""
    if state in store.finished:
        return redis_range(store.finished[state].ordered()[::-1], start, stop)
    want = 1_000_000 if stop < 0 else stop - start + 1
    if state == "active":
        candidates = list(store.active.values())
    elif state == "waiting":
        candidates = list(store.waiting.values()) + store.lifo[::-1]
    elif state == "group-waiting":
        candidates = [i for g in store.groups.values() for i in g.parked.ordered()]
    elif state == "rate-limited":
        candidates = store.ratelimited.ordered()
    elif state == "waiting-children":
        candidates = store.waiting_children.ordered()
    else:
        candidates = store.scheduled.ordered()
    out: list[str] = []
    seen = 0
    for job_id in candidates:
        rec = store.jobs.get(job_id)
        if rec is not None and rec.state == state:
            if seen >= start:
                out.append(job_id)
            seen += 1
            if len(out) >= want:
                break
    return out


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def search(
    store: QueueStore,
    state: str,
    name: str | None,
    data: Mapping[str, Any] | None,
    limit: int,
    scan: int,
    text: str | None = None,
) -> list[str]:
    """Ids of jobs in `state` whose name matches the glob `name`, whose data has the given
    top-level values and whose data's JSON text contains `text` (already ASCII-lowercased),
    looking at the first `scan` jobs of the state, at most `limit`."""
    from ..queries import ascii_lower
    from ..serialize import decode_data

    if state == "prioritized":  # the bands >= 1, after every delayed job of band 0
        scores = store.scheduled.scores
        candidates = [i for i in store.scheduled.ordered() if scores[i] >= SHIFT][:scan]
    elif state in store.finished:
        candidates = store.finished[state].ordered()[::-1][:scan]
    elif state == "active":
        candidates = list(store.active.values())[:scan]
    elif state == "waiting":
        candidates = list(store.waiting.values())[:scan]
    else:
        candidates = store.scheduled.ordered()[:scan]
    out: list[str] = []
    for job_id in candidates:
        rec = store.jobs.get(job_id)
        if rec is None or (state not in store.finished and rec.state != state):
            continue
        if name is not None and not fnmatch.fnmatchcase(rec.name, name):
            continue
        if text is not None and text not in ascii_lower(
            orjson.dumps(decode_data(rec.data)).decode()
        ):
            continue
        if data:
            value = decode_data(rec.data)
            if not isinstance(value, dict):
                continue
            if not all(_same(value.get(k, _MISSING), v) for k, v in data.items()):
                continue
        out.append(job_id)
        if len(out) >= limit:
            break
    return out
