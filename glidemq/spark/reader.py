"""Reading a queue as a DataFrame: the job schema, partition planning, and the partition reader.

A queue keeps its jobs in five structures (wire protocol §2): the `stream` (waiting and
running jobs), the `scheduled` sorted set (delayed and prioritized jobs), and the `completed`,
`failed` and `dlq` sorted sets scored by finish time. Planning cuts each structure the
requested states live in into ranges of about `partitionSize` jobs — score ranges of a
sorted set, entry-id ranges of the stream — and every range becomes a Spark partition read
on its own connection: job ids page by page, then the job hashes in one pipeline per page.

A read of a live queue is not a snapshot: a job that changes state while the read runs can
be missed or, rarely, seen in two partitions. Each row is checked against the states that
were asked for, so a read never returns a job in a state it was not asked for.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glide import (
    Batch,
    ClusterBatch,
    ExclusiveIdBound,
    GlideClusterClient,
    IdBound,
    InfBound,
    Limit,
    MaxId,
    MinId,
    RangeByIndex,
    RangeByScore,
    ScoreBoundary,
)
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..client.connection import Client, close_client, create_client
from ..encoding.serialize import inflate
from ..errors import ServerError, ValidationError
from ..keys import QueueKeys
from .options import ReadOptions
from .taskloop import TaskLoop

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["JOB_COLUMNS", "JOB_SCHEMA", "JobRange", "JobReader", "plan_partitions"]

# (column, Spark type, meaning). The documented schema of `spark.read.format("glidemq")`.
JOB_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("queue", "string", "queue name"),
    ("id", "string", "job id"),
    ("name", "string", "job name"),
    ("state", "string", "waiting, active, delayed, prioritized, completed, failed, dead_letter"),
    ("data", "string", "job data as JSON text (decompressed when stored with `gz:`)"),
    ("opts", "string", "job options as stored, JSON text"),
    ("timestamp", "bigint", "enqueue time, epoch ms"),
    ("delay", "bigint", "delay, ms"),
    ("priority", "int", "priority, 0 = highest"),
    ("attempts_made", "int", "tries that failed so far"),
    ("max_attempts", "int", "tries allowed"),
    ("processed_on", "bigint", "start of the current or last try, epoch ms"),
    ("finished_on", "bigint", "completion or final failure, epoch ms"),
    ("returnvalue", "string", "the processor's result as JSON text"),
    ("failed_reason", "string", "error message of the last failed try"),
    ("stacktrace", "string", "traceback of the last failed try"),
    ("progress", "string", "last reported progress as JSON text"),
    ("parent_id", "string", "parent job id, when a producer set one"),
    ("stalled_count", "int", "times the job was taken back from a dead worker"),
    ("expire_at", "bigint", "epoch ms after which an unstarted job fails (ttl)"),
    ("revoked", "boolean", "the job was revoked"),
)

JOB_SCHEMA = ", ".join(f"{name} {kind}" for name, kind, _ in JOB_COLUMNS)
"""The read schema as a Spark DDL string."""

_ZSET_OF_STATE = {"completed": "completed", "failed": "failed", "dead_letter": "dlq"}
_STREAM_STATES = ("waiting", "active")
_SCHEDULED_STATES = ("delayed", "prioritized")
_INT_COLUMNS = {
    "timestamp": b"timestamp",
    "delay": b"delay",
    "priority": b"priority",
    "attempts_made": b"attemptsMade",
    "max_attempts": b"maxAttempts",
    "processed_on": b"processedOn",
    "finished_on": b"finishedOn",
    "stalled_count": b"stalledCount",
    "expire_at": b"expireAt",
}
_TEXT_COLUMNS = {
    "name": b"name",
    "opts": b"opts",
    "returnvalue": b"returnvalue",
    "failed_reason": b"failedReason",
    "stacktrace": b"stacktrace",
    "progress": b"progress",
    "parent_id": b"parentId",
}


@dataclass(frozen=True)
class JobRange(InputPartition):
    """One partition: a score range [lo, hi) of a sorted set, or an entry-id range
    [lo, hi) of the stream (`hi` None: to the end), and the states to keep from it."""

    source: str  # "completed", "failed", "dlq", "scheduled", "stream", or "empty"
    lo: float | str | None
    hi: float | str | None
    states: tuple[str, ...]


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def _number(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        try:
            return int(float(value))
        except ValueError:
            return None


def _data(value: bytes | None) -> str | None:
    if value is None:
        return None
    if value.startswith(b"gz:"):
        # not our compression after all, or inflating past the payload limit: as stored
        with contextlib.suppress(ValueError, OSError):
            value = inflate(base64.b64decode(value[3:]))
    return value.decode("utf-8", "replace")


def job_state(fields: Mapping[bytes, bytes]) -> str:
    """The state a row reports: the hash's, with dead-lettered failures as `dead_letter`."""
    state = (fields.get(b"state") or b"unknown").decode()
    if state == "failed" and fields.get(b"deadLetter") == b"1":
        return "dead_letter"
    return state


def rows_to_columns(
    queue: str, hashes: Sequence[Mapping[bytes, bytes] | None], states: tuple[str, ...]
) -> dict[str, list[Any]]:
    """Column lists for the job hashes whose state is one of `states` (others are skipped)."""
    cols: dict[str, list[Any]] = {name: [] for name, _, _ in JOB_COLUMNS}
    for fields in hashes:
        if not fields:
            continue  # removed since it was listed
        state = job_state(fields)
        if state not in states:
            continue
        g = fields.get
        cols["queue"].append(queue)
        cols["id"].append(_text(g(b"id")))
        cols["state"].append(state)
        cols["data"].append(_data(g(b"data")))
        for column, field in _TEXT_COLUMNS.items():
            cols[column].append(_text(g(field)))
        for column, field in _INT_COLUMNS.items():
            cols[column].append(_number(g(field)))
        cols["revoked"].append(g(b"revoked") == b"1")
    return cols


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    kinds = {
        "string": pa.string(),
        "bigint": pa.int64(),
        "int": pa.int32(),
        "boolean": pa.bool_(),
    }
    return pa.schema([pa.field(name, kinds[kind]) for name, kind, _ in JOB_COLUMNS])


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- planning ------------------------------------------------------------------------------


async def _zset_ranges(
    client: Client, key: str, source: str, states: tuple[str, ...], size: int
) -> list[JobRange]:
    card = int(await client.zcard(key))
    if card == 0:
        return []
    parts = max(1, math.ceil(card / size))
    bounds: list[float | None] = [None]
    for i in range(1, parts):
        rank = i * card // parts
        hit = await client.zrange_withscores(key, RangeByIndex(rank, rank))
        if hit:
            score = float(next(iter(hit.values())))
            previous = bounds[-1]
            if previous is None or score > previous:
                bounds.append(score)
    bounds.append(None)
    return [JobRange(source, lo, hi, states) for lo, hi in itertools.pairwise(bounds)]


def _entry_ms(entries: Mapping[bytes, Any] | None) -> int | None:
    if not entries:
        return None
    return int(_decode(next(iter(entries))).split("-")[0])


async def _stream_ranges(
    client: Client, key: str, states: tuple[str, ...], size: int
) -> list[JobRange]:
    length = int(await client.xlen(key))
    if length == 0:
        return []
    first = _entry_ms(await client.xrange(key, MinId(), MaxId(), count=1))
    last = _entry_ms(await client.xrevrange(key, MaxId(), MinId(), count=1))
    parts = max(1, math.ceil(length / size))
    if first is None or last is None or parts == 1 or last <= first:
        return [JobRange("stream", None, None, states)]
    # Entry ids start with their creation time: cut the time span into equal slices.
    cuts = sorted({first + i * (last - first + 1) // parts for i in range(1, parts)})
    bounds: list[str | None] = [None, *(f"{c}-0" for c in cuts), None]
    return [JobRange("stream", lo, hi, states) for lo, hi in itertools.pairwise(bounds)]


async def _plan(client: Client, opts: ReadOptions) -> list[JobRange]:
    keys = QueueKeys(opts.queue, opts.prefix)
    ranges: list[JobRange] = []
    wanted = opts.states
    stream_states = tuple(s for s in _STREAM_STATES if s in wanted)
    if stream_states:
        ranges += await _stream_ranges(client, keys.stream, stream_states, opts.partition_size)
    scheduled_states = tuple(s for s in _SCHEDULED_STATES if s in wanted)
    if scheduled_states:
        ranges += await _zset_ranges(
            client, keys.scheduled, "scheduled", scheduled_states, opts.partition_size
        )
    for state, suffix in _ZSET_OF_STATE.items():
        if state in wanted:
            key = keys.base + suffix
            ranges += await _zset_ranges(client, key, suffix, (state,), opts.partition_size)
    return ranges


def plan_partitions(opts: ReadOptions) -> list[JobRange]:
    """The partitions of a read, computed on one short-lived connection."""
    with TaskLoop() as loop:
        client = loop.run(create_client(opts.connection, name="glidemq-spark-plan"))
        try:
            ranges = loop.run(_plan(client, opts))
        finally:
            loop.run(close_client(client))
    # Spark needs at least one partition, even for an empty queue.
    return ranges or [JobRange("empty", None, None, opts.states)]


# -- reading -------------------------------------------------------------------------------


def _score_bound(value: float | str | None, inclusive: bool, inf: InfBound) -> Any:
    if value is None:
        return inf
    return ScoreBoundary(float(value), is_inclusive=inclusive)


async def _zset_page(
    client: Client, key: str, part: JobRange, offset: int, count: int
) -> list[str]:
    query = RangeByScore(
        _score_bound(part.lo, True, InfBound.NEG_INF),
        _score_bound(part.hi, False, InfBound.POS_INF),
        limit=Limit(offset, count),
    )
    return [_decode(m) for m in await client.zrange(key, query)]


async def _stream_page(
    client: Client, key: str, start: Any, part: JobRange, count: int
) -> tuple[list[str], Any]:
    end = MaxId() if part.hi is None else ExclusiveIdBound(str(part.hi))
    entries = await client.xrange(key, start, end, count=count)
    entries = entries or {}
    ids: list[str] = []
    last: bytes | str | None = None
    for entry_id, pairs in entries.items():
        last = entry_id
        for field, value in pairs:
            if field == b"id":
                ids.append(_decode(value))
    if last is None or len(entries) < count:
        return ids, None  # the range is exhausted
    return ids, ExclusiveIdBound(_decode(last))


async def _hashes(client: Client, keys: QueueKeys, ids: list[str]) -> list[Any]:
    if not ids:
        return []
    cluster = isinstance(client, GlideClusterClient)
    batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
    for job_id in ids:
        batch.hgetall(keys.job(job_id))
    replies = await client.exec(batch, False)  # type: ignore[arg-type,unused-ignore]
    if replies is None:
        raise ServerError("reading job hashes: the pipeline returned nothing")
    return list(replies)


def read_partition(opts: ReadOptions, part: JobRange) -> Iterator[dict[str, list[Any]]]:
    """The rows of one partition as column lists, one page (`batchSize` jobs) at a time."""
    if part.source == "empty":
        return
    keys = QueueKeys(opts.queue, opts.prefix)
    with TaskLoop() as loop:
        client = loop.run(create_client(opts.connection, name="glidemq-spark-read"))
        try:
            if part.source == "stream":
                start: Any = MinId() if part.lo is None else IdBound(str(part.lo))
                while start is not None:
                    ids, start = loop.run(
                        _stream_page(client, keys.stream, start, part, opts.batch_size)
                    )
                    if ids:
                        hashes = loop.run(_hashes(client, keys, ids))
                        yield rows_to_columns(opts.queue, hashes, part.states)
            else:
                key = keys.base + part.source
                offset = 0
                while True:
                    ids = loop.run(_zset_page(client, key, part, offset, opts.batch_size))
                    if not ids:
                        break
                    offset += len(ids)
                    hashes = loop.run(_hashes(client, keys, ids))
                    yield rows_to_columns(opts.queue, hashes, part.states)
                    if len(ids) < opts.batch_size:
                        break
        finally:
            loop.run(close_client(client))


class JobReader(DataSourceReader):
    """Spark's reader for `format("glidemq")`: plans ranges, reads each as Arrow batches."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return plan_partitions(self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        schema = _arrow_schema()
        assert isinstance(partition, JobRange)
        for cols in read_partition(self.opts, partition):
            if cols["id"]:
                yield pa.RecordBatch.from_pydict(cols, schema=schema)


def check_schema(schema: StructType) -> None:
    """Refuse a user-given read schema: the source's columns are fixed."""
    given = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    if given != [(name, kind) for name, kind, _ in JOB_COLUMNS]:
        raise ValidationError(
            "schema",
            "the glidemq source has a fixed schema (see docs/SPARK.md); "
            "select or cast columns after load() instead of passing .schema(...)",
        )
