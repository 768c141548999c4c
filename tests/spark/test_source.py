"""The `glidemq` data source end to end: Spark writes jobs, a Worker runs them, Spark reads them.

Every test runs against the session's real embedded Valkey, through the shared local
SparkSession. Spark calls block; they run while no Worker is active in the test's loop.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from glidemq import Job, Queue, Worker
from tests.helpers import wait_for

pytestmark = [
    pytest.mark.spark,
    # cloudpickle walks sys.modules, touching valkey-glide's deprecated alias modules
    pytest.mark.filterwarnings("ignore:Importing from 'glide:DeprecationWarning"),
]


def _writer(df: Any, url: str, queue: str, **options: Any) -> Any:
    w = df.write.format("glidemq").option("url", url).option("queue", queue).mode("append")
    for key, value in options.items():
        w = w.option(key, value)
    return w


def _reader(spark: Any, url: str, queue: str, **options: Any) -> Any:
    r = spark.read.format("glidemq").option("url", url).option("queue", queue)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


async def _square(job: Job[dict[str, int], dict[str, int]]) -> dict[str, int]:
    return {"n": job.data["n"], "square": job.data["n"] ** 2}


async def _run_worker(url: str, queue: Queue[Any, Any], total: int, timeout: float) -> float:
    """Run a Worker until `total` jobs completed; returns the seconds it took."""
    started = time.perf_counter()
    async with Worker(queue.name, _square, connection=url, concurrency=100):

        async def done() -> bool:
            return (await queue.get_job_counts()).completed >= total

        await wait_for(done, timeout=timeout, interval=0.1)
    return time.perf_counter() - started


async def test_write_process_read_back(spark: Any, valkey_server: Any, queue_name: str) -> None:
    """10,000 rows become jobs, a Worker completes them, the read returns them with results;
    writing the same rows again with their ids adds nothing."""
    url = valkey_server.url
    n = 10_000
    df = spark.range(n).selectExpr(
        "concat('job-', id) AS job_id", "'square' AS name", "id AS n", "id % 7 AS bucket"
    )
    async with Queue(queue_name, connection=url) as queue:
        _writer(df, url, queue_name, jobIdColumn="job_id").save()
        counts = await queue.get_job_counts()
        assert counts.waiting == n
        job = await queue.get_job("job-42")
        assert job is not None
        assert (job.name, job.data) == ("square", {"n": 42, "bucket": 0})

        await _run_worker(url, queue, n, timeout=90)

        rows = (
            _reader(spark, url, queue_name, states="completed")
            .select("queue", "id", "name", "state", "data", "returnvalue", "finished_on")
            .collect()
        )
        assert len(rows) == n
        assert {r["id"] for r in rows} == {f"job-{i}" for i in range(n)}
        for r in rows:
            data = orjson.loads(r["data"])
            assert orjson.loads(r["returnvalue"]) == {"n": data["n"], "square": data["n"] ** 2}
            assert (r["queue"], r["name"], r["state"]) == (queue_name, "square", "completed")
            assert r["finished_on"] > 0

        _writer(df, url, queue_name, jobIdColumn="job_id").save()  # a re-run
        counts = await queue.get_job_counts()
        assert (counts.completed, counts.waiting, counts.delayed) == (n, 0, 0)
        await queue.obliterate(force=True)


async def test_per_row_options_and_json_data(
    spark: Any, valkey_server: Any, queue_name: str
) -> None:
    """Name, data, delay, priority and attempts come from columns; data from one JSON column."""
    url = valkey_server.url
    df = spark.createDataFrame(
        [
            ("a", "mail", '{"to": "ada"}', 0, 0, 3),
            ("b", "mail", '{"to": "bob"}', 60_000, 0, None),
            ("c", "sms", '{"to": "cy", "n": [1, 2]}', None, 5, 1),
        ],
        "key string, kind string, payload string, wait long, prio int, tries int",
    )
    _writer(
        df,
        url,
        queue_name,
        nameColumn="kind",
        dataColumn="payload",
        jobIdColumn="key",
        delayColumn="wait",
        priorityColumn="prio",
        attemptsColumn="tries",
        attempts="2",
    ).save()
    async with Queue(queue_name, connection=url) as queue:
        a, b, c = [await queue.get_job(k) for k in "abc"]
        assert a is not None and b is not None and c is not None
        assert (a.name, a.data, a.max_attempts, a.state) == ("mail", {"to": "ada"}, 3, "waiting")
        assert (b.delay, b.max_attempts, b.state) == (60_000, 2, "delayed")
        assert (c.name, c.data, c.priority, c.state) == ("sms", {"to": "cy", "n": [1, 2]}, 5,
                                                          "prioritized")  # fmt: skip
        rows = {r["id"]: r for r in _reader(spark, url, queue_name).collect()}
        assert {k: rows[k]["state"] for k in rows} == {
            "a": "waiting",
            "b": "delayed",
            "c": "prioritized",
        }
        only = _reader(spark, url, queue_name, states="delayed,prioritized").collect()
        assert sorted(r["id"] for r in only) == ["b", "c"]
        await queue.obliterate(force=True)


async def test_read_100k_completed_jobs_in_partitions(
    spark: Any, valkey_server: Any, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """100,000 rows written by Spark, completed by a Worker, read back in several partitions."""
    url = valkey_server.url
    n = 100_000
    df = spark.range(n).selectExpr("concat('k', id) AS job_id", "id AS n").repartition(2)
    df.cache().count()
    async with Queue(queue_name, connection=url) as queue:
        t0 = time.perf_counter()
        _writer(df, url, queue_name, name="square", jobIdColumn="job_id").save()
        write_s = time.perf_counter() - t0
        assert (await queue.get_job_counts()).waiting == n
        work_s = await _run_worker(url, queue, n, timeout=100)

        reader = _reader(spark, url, queue_name, states="completed", partitionSize="25000")
        assert reader.rdd.getNumPartitions() >= 4
        t0 = time.perf_counter()
        ids = reader.select("id").collect()
        read_s = time.perf_counter() - t0
        assert len(ids) == n
        assert len({r["id"] for r in ids}) == n
        t0 = time.perf_counter()
        stats = reader.selectExpr("count(*) AS c", "sum(get_json_object(data, '$.n')) AS s").first()
        agg_s = time.perf_counter() - t0
        assert stats is not None
        assert (stats["c"], stats["s"]) == (n, n * (n - 1) // 2)
        await queue.obliterate(force=True)
    df.unpersist()
    with capsys.disabled():
        print(
            f"\n[spark throughput, local[2]] write {n / write_s:,.0f} rows/s ({write_s:.1f} s); "
            f"worker {n / work_s:,.0f} jobs/s; read {n / read_s:,.0f} rows/s ({read_s:.1f} s, "
            f"collect of ids); read+aggregate {n / agg_s:,.0f} rows/s ({agg_s:.1f} s)"
        )


async def test_task_retry_adds_no_duplicates(
    spark: Any, valkey_server: Any, queue_name: str, tmp_path: Path
) -> None:
    """A write task that fails after adding part of its rows is retried by Spark; with a job
    id column the retry skips what the failed attempt added."""
    url = valkey_server.url
    stream_key = f"glide:{{{queue_name}}}:stream"
    marker = tmp_path / "attempt0-saw"

    def rows(index: int, values: Any) -> Any:
        import valkey
        from pyspark import TaskContext

        ctx = TaskContext.get()
        first_attempt = ctx is not None and ctx.attemptNumber() == 0
        for i, x in enumerate(values):
            if index == 0 and first_attempt and i == 3000:
                # Fail only once the writer has added some of this attempt's rows.
                client = valkey.Valkey.from_url(url.replace("valkey://", "redis://"))
                deadline = time.monotonic() + 30
                seen = 0
                while seen < 500 and time.monotonic() < deadline:
                    seen = int(client.xlen(stream_key))
                    time.sleep(0.05)
                marker.write_text(str(seen))
                raise RuntimeError("injected failure in the first attempt")
            yield (f"r-{x}", x, "x" * 100)

    rdd = spark.sparkContext.parallelize(range(8000), 2).mapPartitionsWithIndex(rows)
    df = spark.createDataFrame(rdd, "job_id string, n long, pad string")
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "250")
    try:
        _writer(df, url, queue_name, name="retry", jobIdColumn="job_id", batchSize="250").save()
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert int(marker.read_text()) >= 500, "the failed attempt added nothing before failing"
    assert int(valkey_server.cli("XLEN", stream_key)) == 8000
    async with Queue(queue_name, connection=url) as queue:
        assert (await queue.get_job_counts()).waiting == 8000
        await queue.obliterate(force=True)


async def test_partial_partition_rewrite_is_idempotent(
    spark: Any, valkey_server: Any, queue_name: str
) -> None:
    """The writer's task body itself: a partition cut off half way, then written in full."""
    import pyarrow as pa

    from glidemq.spark.options import WriteOptions
    from glidemq.spark.writer import JobWriter, RowPlan

    opts = WriteOptions.parse({"url": valkey_server.url, "queue": queue_name, "name": "p",
                               "jobIdColumn": "id", "batchSize": "100"})  # fmt: skip
    schema = spark.createDataFrame([], "id string, n long").schema
    writer = JobWriter(opts, RowPlan.build(opts, schema))
    batches = [
        pa.RecordBatch.from_pydict({"id": [f"i{j}" for j in range(k, k + 300)],
                                    "n": list(range(k, k + 300))})
        for k in range(0, 1500, 300)
    ]  # fmt: skip

    def cut_off() -> Any:
        yield from batches[:2]
        raise RuntimeError("executor lost")

    # A task runs its own event loop: in a thread here, as the test's loop is running.
    with pytest.raises(RuntimeError, match="executor lost"):
        await asyncio.to_thread(writer.write_batches, cut_off())
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        assert (await queue.get_job_counts()).waiting == 600
        stats = await asyncio.to_thread(writer.write_batches, iter(batches))
        assert (stats.rows, stats.added, stats.duplicates) == (1500, 900, 600)
        assert (await queue.get_job_counts()).waiting == 1500
        await queue.obliterate(force=True)
