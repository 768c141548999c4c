"""Suspend and signal in memory: what wire.features.suspend, wire.features.signal and
wire.features.expire_suspended do (glidemq/suspend.py), for TestJob.suspend and TestQueue."""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import JobNotFoundError, JobStateError
from ..suspend import Signal
from .store import QueueStore

__all__ = ["signal", "suspend"]


def suspend(store: QueueStore, job_id: str, entry: str, reason: str, timeout: int, now: int) -> str:
    """Park a running job: 'suspended', or 'stale' / 'missing' when the run lost it."""
    rec = store.leave_active(job_id, entry)
    if isinstance(rec, str):
        return rec
    store.left_active(rec, "delayed", now)  # no attempt counted; a slot is given back
    rec.state, rec.suspend_reason = "suspended", reason
    store.suspended[job_id] = now + timeout if timeout > 0 else float("inf")
    store.emit("suspended", job_id, reason=reason)
    store.notify()
    return "suspended"


def signal(store: QueueStore, job_id: str, name: str, raw: bytes, now: int) -> str:
    """Re-queue a suspended job with the signal appended; its new state."""
    store.expire_suspended(now)
    rec = store.jobs.get(job_id)
    if rec is None:
        raise JobNotFoundError(store.name, job_id)
    if rec.state != "suspended":
        raise JobStateError(job_id, "signal", "it is not suspended")
    data: Any = orjson.loads(raw)
    rec.signals = [*rec.signals, Signal(name, data, now)]
    store.suspended.pop(job_id, None)
    state = store.enqueue(rec, now, now)
    store.emit("signaled", job_id, name=name)
    store.notify()
    return state
