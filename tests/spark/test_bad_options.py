"""Bad options and bad rows give errors that say what is wrong, and write nothing wrong.

Spark wraps errors raised in its Python workers (AnalysisException, PythonException,
Py4JJavaError); the tests check that glidemq's message reaches the user inside them.
"""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest

from glidemq import Queue

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:Importing from 'glide:DeprecationWarning"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(spark: Any, **options: str) -> list[Any]:
    r = spark.read.format("glidemq")
    for key, value in options.items():
        r = r.option(key, value)
    return list(r.load().collect())


def _write(df: Any, mode: str = "append", **options: str) -> None:
    w = df.write.format("glidemq").mode(mode)
    for key, value in options.items():
        w = w.option(key, value)
    w.save()


def _fails(pattern: str, call: Any, *args: Any, **kwargs: Any) -> str:
    # Spark decides the wrapper type (AnalysisException, PythonException, Py4JJavaError)
    with pytest.raises(Exception) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert re.search(pattern, message), f"{pattern!r} not in:\n{message[:3000]}"
    return message


def test_read_needs_a_queue(spark: Any, valkey_server: Any) -> None:
    _fails(r"option 'queue': is required", _read, spark, url=valkey_server.url)


def test_read_unknown_state(spark: Any, valkey_server: Any, queue_name: str) -> None:
    _fails(
        r"option 'states': unknown state 'done'",
        _read,
        spark,
        url=valkey_server.url,
        queue=queue_name,
        states="completed,done",
    )


def test_misspelled_option_gets_a_hint(spark: Any, valkey_server: Any, queue_name: str) -> None:
    _fails(
        r"option 'state': unknown option .*did you mean 'states'",
        _read,
        spark,
        url=valkey_server.url,
        queue=queue_name,
        state="completed",
    )


def test_read_bad_queue_name(spark: Any, valkey_server: Any) -> None:
    _fails(r"forbidden character", _read, spark, url=valkey_server.url, queue="a:b")


def test_read_unreachable_server(spark: Any, queue_name: str) -> None:
    url = f"valkey://127.0.0.1:{_free_port()}"
    _fails(r"cannot connect to valkey://127\.0\.0\.1", _read, spark, url=url, queue=queue_name)


def test_read_refuses_a_user_schema(spark: Any, valkey_server: Any, queue_name: str) -> None:
    reader = (
        spark.read.format("glidemq")
        .schema("id string")
        .option("url", valkey_server.url)
        .option("queue", queue_name)
    )
    _fails(r"fixed schema", lambda: reader.load().collect())


def test_read_of_an_empty_queue_is_empty(spark: Any, valkey_server: Any, queue_name: str) -> None:
    assert _read(spark, url=valkey_server.url, queue=queue_name) == []


def test_write_needs_a_queue(spark: Any, valkey_server: Any) -> None:
    df = spark.createDataFrame([("a", 1)], "name string, n long")
    _fails(r"option 'queue': is required", _write, df, url=valkey_server.url)


def test_write_needs_a_name(spark: Any, valkey_server: Any, queue_name: str) -> None:
    df = spark.createDataFrame([(1,)], "n long")
    _fails(r"every job needs a name", _write, df, url=valkey_server.url, queue=queue_name)


def test_write_missing_column(spark: Any, valkey_server: Any, queue_name: str) -> None:
    df = spark.createDataFrame([("a", 1)], "name string, n long")
    _fails(
        r"option 'jobIdColumn': no column 'key'; the DataFrame has: name, n",
        _write,
        df,
        url=valkey_server.url,
        queue=queue_name,
        jobIdColumn="key",
    )


def test_write_binary_column(spark: Any, valkey_server: Any, queue_name: str) -> None:
    df = spark.createDataFrame([("a", bytearray(b"\x00\x01"))], "name string, blob binary")
    _fails(r"column 'blob': holds binary data", _write, df, url=valkey_server.url,
           queue=queue_name)  # fmt: skip


def test_write_overwrite_mode(spark: Any, valkey_server: Any, queue_name: str) -> None:
    df = spark.createDataFrame([("a", 1)], "name string, n long")
    _fails(r"only appends jobs", _write, df, "overwrite", url=valkey_server.url,
           queue=queue_name)  # fmt: skip


def test_write_unreachable_server(spark: Any, queue_name: str) -> None:
    df = spark.createDataFrame([("a", 1)], "name string, n long")
    url = f"valkey://127.0.0.1:{_free_port()}"
    _fails(r"cannot connect to valkey://127\.0\.0\.1", _write, df, url=url, queue=queue_name)


async def test_write_row_with_invalid_json(spark: Any, valkey_server: Any, queue_name: str) -> None:
    """A row whose JSON data column does not parse names its partition, row and job id."""
    rows = [(f"id-{i}", '{"ok": true}') for i in range(5)]
    rows[3] = ("id-3", "{not json")
    df = spark.createDataFrame(rows, "key string, payload string").coalesce(1)
    _fails(
        r"partition 0, row 3 \(job id 'id-3'\): cannot become a job: "
        r"column 'payload': is not valid JSON",
        _write,
        df,
        url=valkey_server.url,
        queue=queue_name,
        name="n",
        dataColumn="payload",
        jobIdColumn="key",
    )
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        # rows go out 1000 at a time: the bad row stopped the task before anything was sent
        assert (await queue.get_job_counts()).waiting == 0
        await queue.obliterate(force=True)


async def test_write_row_with_bad_job_id(spark: Any, valkey_server: Any, queue_name: str) -> None:
    """The engine's own validation (a ':' in a custom id) is reported with the row."""
    df = spark.createDataFrame([("ok-1", 1), ("bad:2", 2)], "key string, n long").coalesce(1)
    _fails(
        r"partition 0, row 1 \(job id 'bad:2'\): cannot become a job: job_id: .*':'",
        _write,
        df,
        url=valkey_server.url,
        queue=queue_name,
        name="n",
        jobIdColumn="key",
    )
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        await queue.obliterate(force=True)


async def test_write_oversized_payload(spark: Any, valkey_server: Any, queue_name: str) -> None:
    df = spark.createDataFrame([("big", "x" * 1_100_000)], "key string, blob string")
    _fails(
        r"row 0 \(job id 'big'\): cannot become a job: data: serialized payload is \d+ bytes",
        _write,
        df,
        url=valkey_server.url,
        queue=queue_name,
        name="n",
        jobIdColumn="key",
    )
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        assert (await queue.get_job_counts()).waiting == 0
