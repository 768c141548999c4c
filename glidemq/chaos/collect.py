"""Reading what the server says happened: job hashes, queue counts, the stream and its PEL,
and (live, during the run) the queue's events stream."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import sys
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

import orjson
from glide import Batch, ClusterBatch, GlideClusterClient, RangeByIndex, StreamReadOptions

from ..client.connection import Client
from ..keys import QueueKeys
from .app import result_digest
from .ledger import JobCounts, job_number

__all__ = [
    "EventsTail",
    "JobRecord",
    "JobRecords",
    "Kept",
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


_HEX16 = re.compile(r"[0-9a-f]{16}")
_PAGE = 10_000


def _s(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Kept:
    """What the verdict keeps of a job's result (`JobRecord` takes it as `returnvalue`)."""

    own: bool
    pid: int | None
    digest: str | None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's hash at the end of the run (`state` None: the hash does not exist). Of
    the result only what the verdict needs is kept (a soak holds a million of these):
    whether it names this job (`result_own`), the pid that returned it and its digest."""

    job_id: str
    state: str | None
    finished_on: float | None  # epoch seconds
    returnvalue: InitVar[Any]
    failed_reason: str | None
    attempts_made: int
    stalled_count: int
    result_own: bool = field(init=False, default=False)
    result_pid: int | None = field(init=False, default=None)
    result_digest: str | None = field(init=False, default=None)

    def __post_init__(self, returnvalue: Any) -> None:
        if self.state is not None:
            object.__setattr__(self, "state", sys.intern(self.state))
        if isinstance(returnvalue, Kept):  # rebuilt from a compact store
            object.__setattr__(self, "result_own", returnvalue.own)
            object.__setattr__(self, "result_pid", returnvalue.pid)
            object.__setattr__(self, "result_digest", returnvalue.digest)
            return
        if returnvalue is None:
            return
        own = isinstance(returnvalue, dict) and returnvalue.get("id") == self.job_id
        pid = returnvalue.get("pid") if isinstance(returnvalue, dict) else None
        object.__setattr__(self, "result_own", own)
        object.__setattr__(self, "result_pid", int(pid) if isinstance(pid, int) else None)
        object.__setattr__(self, "result_digest", result_digest(returnvalue))


def _record(job_id: str, values: Sequence[Any]) -> JobRecord:
    state, finished, rv, reason, attempts, stalled, _processed = (_s(v) for v in values)
    returnvalue: Any = None
    if rv is not None:
        try:
            returnvalue = orjson.loads(rv)
        except orjson.JSONDecodeError:
            returnvalue = rv  # kept raw; it names no job, so the verdict reports it
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


class JobRecords(Mapping[str, JobRecord]):
    """`{job id: JobRecord}` for a million jobs: the run's own ids `j<i>` are kept in flat
    arrays at index i (about 40 bytes a job; failure reasons in a dict), other ids as
    records in a dict. Records are rebuilt on access."""

    def __init__(self) -> None:
        self._state = bytearray()  # 0: no record, 1: no hash, k: _STATES[k - 2]
        self._finished = array("d")  # NaN: none
        self._pid = array("q")  # -1: none
        self._digest = array("Q")
        self._flags = bytearray()  # bit 0: the result names the job; bit 1: has a digest
        self._attempts = array("L")
        self._stalled = array("L")
        self._reasons: dict[int, str] = {}
        self._states: list[str] = []
        self._other: dict[str, JobRecord] = {}
        self._count = 0

    def _grow(self, n: int) -> None:
        extra = max(n + 1, 2 * len(self._state), 1024) - len(self._state)
        self._state.extend(bytes(extra))
        self._finished.extend(array("d", [math.nan]) * extra)
        self._pid.extend(array("q", [-1]) * extra)
        self._digest.extend(array("Q", bytes(8 * extra)))
        self._flags.extend(bytes(extra))
        self._attempts.extend(array("L", [0]) * extra)
        self._stalled.extend(array("L", [0]) * extra)

    def _code(self, state: str | None) -> int | None:
        if state is None:
            return 1
        if state not in self._states:
            if len(self._states) >= 250:
                return None
            self._states.append(state)
        return self._states.index(state) + 2

    def put(self, rec: JobRecord) -> None:
        """Keep `rec` (replacing an earlier record of the same job)."""
        n = job_number(rec.job_id)
        code = self._code(rec.state)
        digest = rec.result_digest
        compact = code is not None and (digest is None or _HEX16.fullmatch(digest))
        if n is None or not compact:
            if rec.job_id not in self._other and not (n is not None and self._at(n)):
                self._count += 1
            self._other[rec.job_id] = rec
            return
        if n >= len(self._state):
            self._grow(n)
        if not self._state[n] and rec.job_id not in self._other:
            self._count += 1
        self._other.pop(rec.job_id, None)
        assert code is not None
        self._state[n] = code
        self._finished[n] = math.nan if rec.finished_on is None else rec.finished_on
        self._pid[n] = -1 if rec.result_pid is None else rec.result_pid
        self._digest[n] = 0 if digest is None else int(digest, 16)
        self._flags[n] = (1 if rec.result_own else 0) | (2 if digest is not None else 0)
        self._attempts[n] = rec.attempts_made
        self._stalled[n] = rec.stalled_count
        if rec.failed_reason is not None:
            self._reasons[n] = rec.failed_reason
        else:
            self._reasons.pop(n, None)

    def _at(self, n: int) -> bool:
        return n < len(self._state) and self._state[n] != 0

    def __getitem__(self, job_id: str) -> JobRecord:
        if job_id in self._other:
            return self._other[job_id]
        n = job_number(job_id)
        if n is None or not self._at(n):
            raise KeyError(job_id)
        code, flags, finished = self._state[n], self._flags[n], self._finished[n]
        pid = self._pid[n]
        return JobRecord(
            job_id=job_id,
            state=None if code == 1 else self._states[code - 2],
            finished_on=None if math.isnan(finished) else finished,
            returnvalue=Kept(
                own=bool(flags & 1),
                pid=None if pid < 0 else pid,
                digest=f"{self._digest[n]:016x}" if flags & 2 else None,
            ),
            failed_reason=self._reasons.get(n),
            attempts_made=self._attempts[n],
            stalled_count=self._stalled[n],
        )

    def __iter__(self) -> Iterator[str]:
        for n, code in enumerate(self._state):
            if code:
                yield f"j{n}"
        yield from self._other

    def __len__(self) -> int:
        return self._count

    def nbytes(self) -> int:
        """Bytes of the flat arrays (what grows with the number of jobs)."""
        arrays = (self._finished, self._pid, self._digest, self._attempts, self._stalled)
        return sum(a.itemsize * len(a) for a in arrays) + len(self._state) + len(self._flags)


async def read_jobs(client: Client, keys: QueueKeys, ids: Sequence[str]) -> JobRecords:
    """The hash of every job in `ids`, pipelined in chunks."""
    out = JobRecords()
    for start in range(0, len(ids), 1000):
        chunk = list(ids[start : start + 1000])
        batch = _batch(client)
        for job_id in chunk:
            batch.hmget(keys.job(job_id), list(_FIELDS))
        replies = await client.exec(batch, False)  # type: ignore[arg-type,unused-ignore]
        for job_id, values in zip(chunk, replies or [], strict=True):
            out.put(_record(job_id, values))
    return out


@dataclass(frozen=True)
class QueueLeftovers:
    """What is left in the queue's structures at the end: entries still pending for the
    consumer group, stream entries, the sizes of the finished sets, and the members of
    the completed set (only those whose hash does not say completed, when read with
    `records`)."""

    pending: int
    stream_length: int
    completed_set: int
    failed_set: int
    completed_ids: frozenset[str]


async def read_leftovers(
    client: Client, keys: QueueKeys, records: Mapping[str, JobRecord] | None = None
) -> QueueLeftovers:
    """Read the PEL size, the stream length and the finished sets. The completed set is
    read a page at a time; with `records`, only its members whose record is not completed
    are kept (a soak's set holds a million ids)."""
    pending = 0
    with contextlib.suppress(Exception):  # no group yet: nothing pending
        reply = await client.xpending(keys.stream, "workers")
        pending = int(reply[0] or 0)  # type: ignore[arg-type]
    length = int(await client.xlen(keys.stream))
    failed = int(await client.zcard(keys.failed))
    size = int(await client.zcard(keys.completed))
    kept: set[str] = set()
    seen = 0
    for start in range(0, size, _PAGE):
        page = await client.zrange(keys.completed, RangeByIndex(start, start + _PAGE - 1))
        seen += len(page)
        for member in page:
            job_id = _s(member) or ""
            rec = records.get(job_id) if records is not None else None
            if records is None or rec is None or rec.state != "completed":
                kept.add(job_id)
    return QueueLeftovers(pending, length, max(size, seen), failed, frozenset(kept))


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
    members = await client.zrange(keys.scheduled, RangeByIndex(0, -1))
    out.update(_s(m) or "" for m in members)
    return out


@dataclass
class EventsTail:
    """Follows the queue's events stream during the run and counts `completed` and
    `stalled` events per job. The stream is capped (about the last 1000 events), so the
    tail reads often; `missed` says how many events were trimmed before it saw them."""

    client: Client
    keys: QueueKeys
    completed: JobCounts = field(default_factory=JobCounts)
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
                    self.completed.add(job)
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
