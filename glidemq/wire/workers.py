"""The queue's worker registry (`glide:{q}:workers`): each started Worker's entry, written on
its heartbeats (one HSET every few seconds), and the live ones read back. A worker that
closes cleanly deletes its own entry (the library's deferActive); one silent for
`_DELETE_BEATS` heartbeats is deleted by the next reader.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..client.context import QueueContext

__all__ = ["WorkerInfo", "WorkerRegistration", "get_workers", "workers_key"]

_STALE_BEATS = 3  # heartbeats a worker may miss before it counts as gone
_DELETE_BEATS = 10  # ... and after which its entry is deleted
_STALE_SLACK_MS = 2000


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker of the queue. Times are epoch ms."""

    id: str
    host: str
    pid: int
    started: int
    concurrency: int
    last_heartbeat: int
    running: tuple[str, ...] = ()
    """Ids of the jobs it ran at its last heartbeat (at most 20)."""
    completed: int = 0
    """Jobs it completed since it started (as of its last heartbeat)."""
    failed: int = 0
    """Tries of it that failed since it started."""

    def per_minute(self) -> float:
        """Jobs it finished (completed or failed) per minute since it started."""
        minutes = max(self.last_heartbeat - self.started, 1000) / 60_000
        return (self.completed + self.failed) / minutes


def workers_key(ctx: QueueContext) -> str:
    """The key of the queue's worker registry hash."""
    return ctx.keys.base + "workers"


class WorkerRegistration:
    """A worker's entry in the queue's `workers` hash, refreshed on each heartbeat."""

    def __init__(self, consumer: str, concurrency: int, interval_ms: int) -> None:
        self.consumer = consumer
        self.base = {
            "id": consumer,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "concurrency": concurrency,
            "interval": interval_ms,
        }

    async def beat(self, ctx: QueueContext, stats: Mapping[str, Any] | None = None) -> None:
        """Write the entry with the current time and `stats` (what it runs, what it
        finished), in one HSET."""
        now = ctx.now_ms()
        self.base.setdefault("started", now)
        value = orjson.dumps({**self.base, **(stats or {}), "heartbeat": now})
        await ctx.command(lambda c: c.hset(workers_key(ctx), {self.consumer: value}))


async def get_workers(ctx: QueueContext, now: int) -> list[WorkerInfo]:
    """Workers that heart-beat within the last 3 heartbeat intervals, oldest first. Entries
    silent for 10 intervals are deleted on the way (a worker that closes removes its own)."""
    key = workers_key(ctx)
    raw = await ctx.command(lambda c: c.hgetall(key))
    live: list[WorkerInfo] = []
    stale: list[bytes] = []
    for field, value in (raw or {}).items():
        try:
            e = orjson.loads(value)
            beat = int(e["heartbeat"])
            silent = now - beat - _STALE_SLACK_MS
            interval = int(e.get("interval", 5000))
            if silent > _DELETE_BEATS * interval:
                stale.append(field)
            if silent > _STALE_BEATS * interval:
                continue
            live.append(
                WorkerInfo(
                    id=str(e.get("id", field.decode())),
                    host=str(e.get("host", "")),
                    pid=int(e.get("pid", 0)),
                    started=int(e.get("started", 0)),
                    concurrency=int(e.get("concurrency", 0)),
                    last_heartbeat=beat,
                    running=tuple(str(i) for i in e.get("running", ())[:20]),
                    completed=int(e.get("completed", 0)),
                    failed=int(e.get("failed", 0)),
                )
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            stale.append(field)
    if stale:
        fields: list[str | bytes] = list(stale)
        await ctx.command(lambda c: c.hdel(key, fields))
    return sorted(live, key=lambda w: (w.started, w.id))
