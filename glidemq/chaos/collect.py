"""Reading what the server says happened: job hashes, queue counts, the stream and its PEL,
and (live, during the run) the queue's events stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from glide import Batch, ClusterBatch, GlideClusterClient, StreamReadOptions

from ..connection import Client
from ..keys import QueueKeys

__all__ = [
    "EventsTail",
    "JobRecord",
    "QueueLeftovers",
    "read_in_queue",
    "read_jobs",
    "read_leftovers",
]

_FIELDS = (
    "state",
    "finishedOn",
    "returnvalue",
    "failedReason",
    "attemptsMade",
    "stalledCount",
    "processedOn",
)


def _s(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class JobRecord:
    """One job's hash at the end of the run (`state` None: the hash does not exist)."""

    job_id: str
    state: str | None
    finished_on: float | None  # epoch seconds
    returnvalue: Any
    failed_reason: str | None
    attempts_made: int
    stalled_count: int

    @property
    def result_pid(self) -> int | None:
        rv = self.returnvalue
        return int(rv["pid"]) if isinstance(rv, dict) and "pid" in rv else None


def _record(job_id: str, values: Sequence[Any]) -> JobRecord:
    state, finished, rv, reason, attempts, stalled, _processed = (_s(v) for v in values)
    returnvalue: Any = None
    if rv is not None:
        try:
            returnvalue = orjson.loads(rv)
        except orjson.JSONDecodeError:
            returnvalue = rv  # kept raw; the invariant check reports it
    return JobRecord(
        job_id=job_id,
        state=state,
        finished_on=int(finished) / 1000 if finished else None,
        returnvalue=returnvalue,
        failed_reason=reason,
        attempts_made=int(attempts or 0),
        stalled_count=int(stalled or 0),
    )


def _entry_time(entry_id: str) -> float:
    """Epoch seconds of a stream entry id (its first part is the server's time in ms)."""
    return int(entry_id.split("-")[0]) / 1000


def _batch(client: Client) -> Batch | ClusterBatch:
    return ClusterBatch(False) if isinstance(client, GlideClusterClient) else Batch(False)


async def read_jobs(client: Client, keys: QueueKeys, ids: Sequence[str]) -> dict[str, JobRecord]:
    """The hash of every job in `ids`, pipelined in chunks."""
    out: dict[str, JobRecord] = {}
    for start in range(0, len(ids), 1000):
        chunk = list(ids[start : start + 1000])
        batch = _batch(client)
        for job_id in chunk:
            batch.hmget(keys.job(job_id), list(_FIELDS))
        replies = await client.exec(batch, False)  # type: ignore[arg-type,unused-ignore]
        for job_id, values in zip(chunk, replies or [], strict=True):
            out[job_id] = _record(job_id, values)
    return out


@dataclass(frozen=True)
class QueueLeftovers:
    """What is left in the queue's structures at the end: entries still pending for the
    consumer group, stream entries, and the sizes of the finished sets."""

    pending: int
    stream_length: int
    completed_set: int
    failed_set: int
    completed_ids: frozenset[str]


async def read_leftovers(client: Client, keys: QueueKeys) -> QueueLeftovers:
    """Read the PEL size, the stream length and the finished sets."""
    pending = 0
    with contextlib.suppress(Exception):  # no group yet: nothing pending
        reply = await client.xpending(keys.stream, "workers")
        pending = int(reply[0] or 0)  # type: ignore[arg-type]
    length = int(await client.xlen(keys.stream))
    completed = await client.zrange(keys.completed, _all())
    failed = int(await client.zcard(keys.failed))
    ids = frozenset(x.decode() if isinstance(x, bytes) else str(x) for x in completed)
    return QueueLeftovers(pending, length, len(ids), failed, ids)


async def read_in_queue(client: Client, keys: QueueKeys) -> set[str]:
    """Ids the queue can still deliver: named by an entry of its stream (waiting, or
    pending with a worker) or in its scheduled set (delayed, prioritized)."""
    from glide import ExclusiveIdBound, IdBound, MaxId, MinId

    out: set[str] = set()
    start: IdBound | ExclusiveIdBound | MinId = MinId()
    while True:
        page = await client.xrange(keys.stream, start, MaxId(), 5000)
        if not page:
            break
        for entry_id, fields in page.items():
            start = ExclusiveIdBound(_s(entry_id) or "0-0")
            for name, value in fields:
                if name in (b"id", "id"):
                    out.add(_s(value) or "")
        if len(page) < 5000:
            break
    members = await client.zrange(keys.scheduled, _all())
    out.update(_s(m) or "" for m in members)
    return out


def _all() -> Any:
    from glide import RangeByIndex

    return RangeByIndex(0, -1)


@dataclass
class EventsTail:
    """Follows the queue's events stream during the run and counts `completed` and
    `stalled` events per job. The stream is capped (about the last 1000 events), so the
    tail reads often; `missed` says how many events were trimmed before it saw them."""

    client: Client
    keys: QueueKeys
    completed: Counter[str] = field(default_factory=Counter)
    completed_ts: dict[str, float] = field(default_factory=dict)
    stalled: Counter[str] = field(default_factory=Counter)
    stalled_ts: dict[str, list[float]] = field(default_factory=dict)
    read: int = 0
    missed: int | None = None
    errors: int = 0
    _last: str = "0-0"
    _stop: bool = False

    async def run(self) -> None:
        """Read until `stop()`; survives server outages (reads again after them)."""
        # Back to back while there is something to read; a short blocking read when idle.
        busy = StreamReadOptions(count=1000)
        idle = StreamReadOptions(count=1000, block_ms=50)
        options = busy
        while True:
            try:
                reply = await self.client.xread({self.keys.events: self._last}, options)
            except Exception:
                self.errors += 1
                if self._stop:
                    return
                await asyncio.sleep(0.2)
                continue
            entries = next(iter(reply.values()), {}) if reply else {}
            for entry_id, fields in entries.items():
                self._last = entry_id.decode()
                self.read += 1
                values = dict(fields)
                name = _s(values.get(b"event"))
                job = _s(values.get(b"jobId")) or ""
                if name == "completed":
                    self.completed[job] += 1
                    self.completed_ts.setdefault(job, _entry_time(self._last))
                elif name == "stalled":
                    self.stalled[job] += 1
                    self.stalled_ts.setdefault(job, []).append(_entry_time(self._last))
            if not entries and self._stop:
                return
            options = busy if entries else idle

    def stop(self) -> None:
        self._stop = True

    async def count_missed(self) -> None:
        """Compare what was read with how many events the stream ever had."""
        with contextlib.suppress(Exception):
            info: Any = await self.client.custom_command(["XINFO", "STREAM", self.keys.events])
            if isinstance(info, dict):
                added = info.get(b"entries-added")
            else:
                flat = list(info)
                added = dict(zip(flat[::2], flat[1::2], strict=False)).get(b"entries-added")
            if added is not None:
                self.missed = max(0, int(added) - self.read)
