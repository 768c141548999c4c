"""Writing a DataFrame as jobs: how a row becomes (name, data, options), and the partition writer.

Each partition adds its rows with `Queue.add_bulk`, `batchSize` jobs per call, on one
connection of its own. With a job id column the write is idempotent: a job whose id exists
is skipped by the server, so re-running a write, or Spark retrying a failed task that had
already added part of its rows, adds nothing twice. Without one, a retried task adds its
rows again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DecimalType,
    IntegralType,
    MapType,
    StringType,
    StructType,
)

from ..client.connection import ConnectionOptions, close_client, create_client
from ..errors import ValidationError
from ..queue.queue import Queue
from .options import WriteOptions
from .taskloop import TaskLoop

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JobWriter", "RowPlan", "WriteStats", "check_reachable"]

log = logging.getLogger("glidemq.spark")

_JOBS_FIELD = re.compile(r"^jobs\[(\d+)\]\.?(.*)$")


def _has(dtype: DataType, kind: type[DataType]) -> bool:
    """Whether `dtype` is or contains (at any depth) a type of `kind`."""
    if isinstance(dtype, kind):
        return True
    if isinstance(dtype, StructType):
        return any(_has(f.dataType, kind) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return _has(dtype.elementType, kind)
    if isinstance(dtype, MapType):
        return _has(dtype.keyType, kind) or _has(dtype.valueType, kind)
    return False


def _jsonable(value: Any) -> Any:
    """Decimals become JSON numbers (floats); containers are walked."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class RowPlan:
    """Which column feeds which part of a job; built once on the driver from the schema."""

    name: str | None
    name_column: str | None
    data_column: str | None
    data_is_json: bool
    data_columns: tuple[str, ...]
    job_id_column: str | None
    delay_column: str | None
    priority_column: str | None
    attempts_column: str | None
    opts_column: str | None
    opts_is_json: bool
    convert: frozenset[str]  # columns holding decimals
    base_opts: tuple[tuple[str, int], ...]

    @classmethod
    def build(cls, opts: WriteOptions, schema: StructType) -> RowPlan:
        """Check the options against the DataFrame's columns; every problem names the option."""
        types = {f.name: f.dataType for f in schema.fields}
        listed = ", ".join(types) or "none"

        def column(option: str, name: str | None, *allowed: type[DataType]) -> str | None:
            if name is None:
                return None
            if name not in types:
                raise ValidationError(
                    f"option {option!r}", f"no column {name!r}; the DataFrame has: {listed}"
                )
            if allowed and not isinstance(types[name], allowed):
                kinds = " or ".join(a.__name__.removesuffix("Type").lower() for a in allowed)
                raise ValidationError(
                    f"option {option!r}",
                    f"column {name!r} is {types[name].simpleString()}, expected {kinds}",
                )
            return name

        name_column = opts.name_column
        if name_column is None and opts.name is None:
            if "name" not in types:
                raise ValidationError(
                    "option 'name'",
                    "every job needs a name: set .option('name', '<job name>'), "
                    ".option('nameColumn', '<column>'), or have a column called 'name'",
                )
            name_column = "name"
        column("nameColumn", name_column, StringType)
        column("jobIdColumn", opts.job_id_column, StringType, IntegralType)
        column("delayColumn", opts.delay_column, IntegralType)
        column("priorityColumn", opts.priority_column, IntegralType)
        column("attemptsColumn", opts.attempts_column, IntegralType)
        column("optsColumn", opts.opts_column, StringType, StructType, MapType)
        column("dataColumn", opts.data_column, StringType, StructType, MapType, ArrayType)
        used = {
            name_column,
            opts.job_id_column,
            opts.delay_column,
            opts.priority_column,
            opts.attempts_column,
            opts.opts_column,
        }
        if opts.data_column is not None:
            data_columns: tuple[str, ...] = (opts.data_column,)
        else:
            data_columns = tuple(c for c in types if c not in used)
        for c in data_columns:
            if _has(types[c], BinaryType):
                raise ValidationError(
                    f"column {c!r}",
                    "holds binary data, which JSON cannot carry: encode it first "
                    "(for example base64(col)) or drop the column",
                )
        base = tuple(
            (k, v)
            for k, v, default in (
                ("delay", opts.delay, 0),
                ("priority", opts.priority, 0),
                ("attempts", opts.attempts, 1),
            )
            if v != default
        )
        return cls(
            name=opts.name,
            name_column=name_column,
            data_column=opts.data_column,
            data_is_json=opts.data_column is not None
            and isinstance(types[opts.data_column], StringType),
            data_columns=data_columns,
            job_id_column=opts.job_id_column,
            delay_column=opts.delay_column,
            priority_column=opts.priority_column,
            attempts_column=opts.attempts_column,
            opts_column=opts.opts_column,
            opts_is_json=opts.opts_column is not None
            and isinstance(types[opts.opts_column], StringType),
            convert=frozenset(c for c in data_columns if _has(types[c], DecimalType)),
            base_opts=base,
        )

    def job(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The `add_bulk` item for one row (a dict of the row's column values)."""
        if self.name_column is not None:
            name = row[self.name_column]
            if name is None:
                raise ValidationError(f"column {self.name_column!r}", "the job name is null")
        else:
            name = self.name
        if self.data_column is not None:
            data = row[self.data_column]
            if self.data_is_json and data is not None:
                try:
                    data = orjson.loads(data)
                except orjson.JSONDecodeError as exc:
                    raise ValidationError(
                        f"column {self.data_column!r}", f"is not valid JSON: {exc}"
                    ) from None
        else:
            data = {c: row[c] for c in self.data_columns}
        if self.convert:
            data = _jsonable(data)
        opts: dict[str, Any] = dict(self.base_opts)
        if self.opts_column is not None:
            extra = row[self.opts_column]
            if self.opts_is_json and extra is not None:
                try:
                    extra = orjson.loads(extra)
                except orjson.JSONDecodeError as exc:
                    raise ValidationError(
                        f"column {self.opts_column!r}", f"is not valid JSON: {exc}"
                    ) from None
            if extra is not None:
                if not isinstance(extra, dict):
                    raise ValidationError(
                        f"column {self.opts_column!r}", "must hold a JSON object of job options"
                    )
                opts.update({k: v for k, v in extra.items() if v is not None})
        for key, col in (
            ("delay", self.delay_column),
            ("priority", self.priority_column),
            ("attempts", self.attempts_column),
        ):
            if col is not None and row[col] is not None:
                opts[key] = int(row[col])
        if self.job_id_column is not None and row[self.job_id_column] is not None:
            opts["job_id"] = str(row[self.job_id_column])
        return {"name": name, "data": data, "opts": opts}


@dataclass(frozen=True)
class WriteStats(WriterCommitMessage):
    """What one partition did: rows seen, jobs added, rows skipped as existing job ids."""

    partition: int
    rows: int
    added: int
    duplicates: int


def _row_error(exc: ValidationError, partition: int, row: int, job_id: Any) -> ValidationError:
    where = f"partition {partition}, row {row}"
    if job_id is not None:
        where += f" (job id {job_id!r})"
    return ValidationError(where, f"cannot become a job: {exc}")


async def _ping(connection: ConnectionOptions) -> None:
    client = await create_client(connection, name="glidemq-spark-check")
    await close_client(client)


def check_reachable(connection: ConnectionOptions) -> None:
    """Raise glidemq's ConnectionError now, on the driver, if the server cannot be reached."""
    with TaskLoop() as loop:
        loop.run(_ping(connection))


class JobWriter(DataSourceArrowWriter):
    """Spark's writer for `format("glidemq")`: one `add_bulk` per `batchSize` rows."""

    def __init__(self, opts: WriteOptions, plan: RowPlan) -> None:
        self.opts = opts
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteStats:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        return self.write_batches(iterator, partition)

    def write_batches(self, batches: Iterator[pa.RecordBatch], partition: int = 0) -> WriteStats:
        """Add the rows of `batches` as jobs (the body of a write task)."""
        opts = self.opts
        with TaskLoop() as loop:
            queue: Queue[Any, Any] = Queue(
                opts.queue,
                connection=opts.connection,
                prefix=opts.prefix,
                compression=opts.compression,
            )
            try:
                return loop.run(self._write(queue, batches, partition))
            finally:
                loop.run(queue.close())

    async def _write(
        self, queue: Queue[Any, Any], batches: Iterator[pa.RecordBatch], partition: int
    ) -> WriteStats:
        # One add_bulk is in flight while the next chunk of rows is converted: the server's
        # work and the round trip overlap with this process's. Chunks are sent in row order
        # on one connection, so jobs are added in the partition's order.
        plan, size = self.plan, self.opts.batch_size
        rows = added = duplicates = 0
        inflight: tuple[asyncio.Task[list[Any]], list[dict[str, Any]], int] | None = None

        async def settle() -> None:
            nonlocal added, duplicates, inflight
            if inflight is None:
                return
            task, chunk, first = inflight
            inflight = None
            try:
                results = await task
            except ValidationError as exc:
                m = _JOBS_FIELD.match(exc.field)
                if m is None:
                    raise
                i = int(m.group(1))
                inner = ValidationError(m.group(2) or "job", exc.reason)
                job_id = chunk[i]["opts"].get("job_id")
                raise _row_error(inner, partition, first + i, job_id) from None
            n = sum(1 for r in results if r is not None)
            added += n
            duplicates += len(results) - n

        async def send(chunk: list[dict[str, Any]], first: int) -> None:
            nonlocal inflight
            task = asyncio.ensure_future(queue.add_bulk(chunk))
            await asyncio.sleep(0)  # let it put its pipeline on the wire
            await settle()
            inflight = (task, chunk, first)

        chunk: list[dict[str, Any]] = []
        try:
            for batch in batches:
                for row in batch.to_pylist(maps_as_pydicts="strict"):
                    try:
                        chunk.append(plan.job(row))
                    except ValidationError as exc:
                        job_id = row.get(plan.job_id_column) if plan.job_id_column else None
                        raise _row_error(exc, partition, rows, job_id) from None
                    rows += 1
                    if len(chunk) >= size:
                        await send(chunk, rows - len(chunk))
                        chunk = []
            if chunk:
                await send(chunk, rows - len(chunk))
            await settle()
        finally:
            if inflight is not None:  # an error on the way: wait for what was sent
                with contextlib.suppress(Exception):
                    await inflight[0]
        return WriteStats(partition, rows, added, duplicates)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        stats = [m for m in messages if isinstance(m, WriteStats)]
        log.info(
            "glidemq write to %r: %d rows, %d jobs added, %d existing ids skipped",
            self.opts.queue,
            sum(s.rows for s in stats),
            sum(s.added for s in stats),
            sum(s.duplicates for s in stats),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, WriteStats)]
        log.error(
            "glidemq write to %r failed; %d partitions had finished and added %d jobs%s",
            self.opts.queue,
            len(done),
            sum(s.added for s in done),
            "" if self.plan.job_id_column else " (no jobIdColumn: a re-run adds those again)",
        )
