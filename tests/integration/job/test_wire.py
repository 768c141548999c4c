"""Wire compatibility: a producer written from the wire document alone (plain valkey-py, no
glidemq import on its side) must interoperate with glidemq workers, and glidemq must write
exactly the keys, hash fields, scores and return values the document describes.

Every test runs on standalone and cluster Valkey (the `conn` / `queue` fixtures); the raw
client is valkey-py's `Valkey` or `ValkeyCluster`, which routes each command by its keys.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import valkey
from valkey.cluster import ValkeyCluster

from glidemq import (
    Backoff,
    ConnectionOptions,
    Job,
    JobOptions,
    KeepJobs,
    PayloadTooLargeError,
    Queue,
    ValidationError,
    Worker,
)
from glidemq.client.functions import LIBRARY_VERSION, library_source
from tests.helpers import wait_for

SHIFT = 2**42
assert SHIFT == 4398046511104  # the document's constant


def now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------- raw producer


@pytest.fixture
def raw(conn: ConnectionOptions) -> Iterator[Any]:
    """A plain valkey-py client (decode_responses=True) on the same server or cluster."""
    host, port = conn.addresses[0]
    client: Any
    if conn.cluster:
        client = ValkeyCluster(host=host, port=port, decode_responses=True)
    else:
        client = valkey.Valkey(host=host, port=port, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def prefix(queue_name: str) -> str:
    """`glide:{queueName}` as the document builds it."""
    return f"glide:{{{queue_name}}}"


def add_job(
    r: Any,
    queue_name: str,
    name: str,
    data: str,
    opts: str = "{}",
    *,
    timestamp: int | None = None,
    delay: int = 0,
    priority: int = 0,
    max_attempts: int = 0,
    ttl: int = 0,
    custom_id: str = "",
) -> str:
    """FCALL glidemq_addJob with the document's 4 keys and 17 args."""
    p = prefix(queue_name)
    ts = now_ms() if timestamp is None else timestamp
    return str(
        r.fcall(
            "glidemq_addJob",
            4,
            f"{p}:id",
            f"{p}:stream",
            f"{p}:scheduled",
            f"{p}:events",
            name,
            data,
            opts,
            str(ts),
            str(delay),
            str(priority),
            "",
            str(max_attempts),
            "",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            str(ttl),
            custom_id,
        )
    )


def dedup_job(
    r: Any,
    queue_name: str,
    dedup_id: str,
    ttl_ms: int,
    mode: str,
    name: str,
    data: str,
    *,
    timestamp: int | None = None,
    delay: int = 0,
) -> str:
    """FCALL glidemq_dedup with the document's 5 keys and 20 args."""
    p = prefix(queue_name)
    ts = now_ms() if timestamp is None else timestamp
    args = [name, data, "{}", str(ts), str(delay), "0", "", "0", "", "0", "0", "0", "0", "0"]
    args += ["0", "0", ""]
    assert len(args) == 17
    return str(
        r.fcall(
            "glidemq_dedup",
            5,
            f"{p}:dedup",
            f"{p}:id",
            f"{p}:stream",
            f"{p}:scheduled",
            f"{p}:events",
            dedup_id,
            str(ttl_ms),
            mode,
            *args,
        )
    )


def active_count(r: Any, queue_name: str) -> int:
    """First element of `XPENDING stream workers` (valkey-py parses it as 'pending')."""
    return int(r.xpending(f"{prefix(queue_name)}:stream", "workers")["pending"])


async def _recorder(job: Job[Any, Any]) -> Any:
    return {"echo": job.data}


# --------------------------------------------------------------------------- producer


async def test_doc_python_producer_jobs_are_processed_by_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    # The library is loaded by the Queue (the document's "Option A").
    r, queue_name, p = raw, queue.name, prefix(queue.name)
    ids: list[str] = []
    for i in range(5):
        job_data = json.dumps({"to": f"user{i}@example.com", "subject": "Hello"})
        job_opts = json.dumps({})
        timestamp = str(int(time.time() * 1000))
        result = r.fcall(
            "glidemq_addJob",
            4,  # numkeys
            f"{p}:id",  # key 1: id counter
            f"{p}:stream",  # key 2: stream
            f"{p}:scheduled",  # key 3: scheduled ZSet
            f"{p}:events",  # key 4: events stream
            "send-email",  # arg 1:  jobName
            job_data,  # arg 2:  jobData
            job_opts,  # arg 3:  jobOpts
            timestamp,  # arg 4:  timestamp
            "0",  # arg 5:  delay
            "0",  # arg 6:  priority
            "",  # arg 7:  parentId
            "0",  # arg 8:  maxAttempts
            "",  # arg 9:  orderingKey
            "0",  # arg 10: groupConcurrency
            "0",  # arg 11: groupRateMax
            "0",  # arg 12: groupRateDuration
            "0",  # arg 13: tbCapacity
            "0",  # arg 14: tbRefillRate
            "0",  # arg 15: jobCost
            "0",  # arg 16: ttl
            "",  # arg 17: customJobId
        )
        ids.append(result)
        assert r.hget(f"{p}:job:{result}", "state") == "waiting"
    assert ids == ["1", "2", "3", "4", "5"]
    assert r.xlen(f"{p}:stream") == 5

    seen: list[tuple[str, str, Any]] = []

    async def send(job: Job[Any, Any]) -> Any:
        seen.append((job.id, job.name, job.data))
        return {"sent": job.data["to"]}

    async with Worker(queue_name, send, connection=conn, concurrency=3) as worker:
        await wait_for(lambda: worker.completed_count == 5)

    assert sorted(seen) == [
        (str(i + 1), "send-email", {"to": f"user{i}@example.com", "subject": "Hello"})
        for i in range(5)
    ]
    for i, job_id in enumerate(ids):
        h = r.hgetall(f"{p}:job:{job_id}")
        assert h["state"] == "completed"
        assert json.loads(h["returnvalue"]) == {"sent": f"user{i}@example.com"}
    assert r.zcard(f"{p}:completed") == 5
    assert r.xlen(f"{p}:stream") == 0


async def test_option_b_function_load_from_valkey_py_then_produce(
    conn: ConnectionOptions, queue_name: str, raw: Any
) -> None:
    # Remove the library everywhere, then load it the way a non-Python producer would.
    raw.function_delete("glidemq")
    with pytest.raises(valkey.exceptions.ResponseError):
        raw.fcall("glidemq_version", 1, "{glidemq}:_")
    raw.function_load(library_source(), replace=True)  # valkey-py sends it to every primary
    assert raw.fcall("glidemq_version", 1, "{glidemq}:_") == str(LIBRARY_VERSION)

    job_id = add_job(raw, queue_name, "b", json.dumps({"n": 7}))
    q: Queue[Any, Any] = Queue(queue_name, connection=conn)
    try:
        async with Worker(queue_name, _recorder, connection=conn) as worker:
            await wait_for(lambda: worker.completed_count == 1)
        h = raw.hgetall(f"{prefix(queue_name)}:job:{job_id}")
        assert h["state"] == "completed"
        assert json.loads(h["returnvalue"]) == {"echo": {"n": 7}}
    finally:
        await q.obliterate(force=True)
        await q.close()


# --------------------------------------------------------------------------- keys and fields


async def test_documented_keys_exist_with_documented_types(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    ok = await queue.add("ok", {"x": 1})
    bad = await queue.add("bad", {"x": 2})
    delayed = await queue.add("later", None, {"delay": 60_000})
    deduped = await queue.add("d", None, {"deduplication": {"id": "d-1"}})
    assert ok and bad and delayed and deduped

    async def process(job: Job[Any, Any]) -> str:
        await job.log(f"running {job.id}")
        if job.name == "bad":
            raise RuntimeError("nope")
        return "done"

    async with Worker(queue.name, process, connection=conn):
        await wait_for(lambda: raw.zcard(f"{p}:completed") == 2 and raw.zcard(f"{p}:failed") == 1)
    await queue.pause()

    expected = {
        f"{p}:id": "string",
        f"{p}:stream": "stream",
        f"{p}:scheduled": "zset",
        f"{p}:completed": "zset",
        f"{p}:failed": "zset",
        f"{p}:events": "stream",
        f"{p}:meta": "hash",
        f"{p}:dedup": "hash",
        f"{p}:job:{ok.id}": "hash",
        f"{p}:job:{bad.id}": "hash",
        f"{p}:job:{delayed.id}": "hash",
        f"{p}:log:{ok.id}": "list",
        f"{p}:log:{bad.id}": "list",
    }
    assert {key: raw.type(key) for key in expected} == expected
    assert raw.get(f"{p}:id") == "4"  # auto-increment counter: four jobs were added
    assert raw.zrange(f"{p}:scheduled", 0, -1) == [delayed.id]
    assert set(raw.zrange(f"{p}:completed", 0, -1)) == {ok.id, deduped.id}
    assert raw.zrange(f"{p}:failed", 0, -1) == [bad.id]
    assert raw.hget(f"{p}:meta", "paused") == "1"
    assert raw.lrange(f"{p}:log:{ok.id}", 0, -1) == [f"running {ok.id}"]
    # dedup: field = dedup id, value = jobId:timestamp
    entry = raw.hget(f"{p}:dedup", "d-1")
    job_id, _, ts = entry.partition(":")
    assert job_id == deduped.id and ts == raw.hget(f"{p}:job:{deduped.id}", "timestamp")


async def test_job_hash_fields_have_documented_meaning(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    ts = now_ms()
    data = json.dumps({"to": "ada@example.com"})
    opts = json.dumps({"attempts": 2})
    job_id = add_job(raw, queue.name, "send-email", data, opts, timestamp=ts, max_attempts=2)
    h = raw.hgetall(f"{p}:job:{job_id}")
    assert h["id"] == job_id
    assert h["name"] == "send-email"
    assert h["data"] == data
    assert json.loads(h["opts"]) == {"attempts": 2}
    assert h["timestamp"] == str(ts)
    assert h["attemptsMade"] == "0"
    assert h["delay"] == "0"
    assert h["priority"] == "0"
    assert h["maxAttempts"] == "2"
    assert h["state"] == "waiting"
    for absent in ("returnvalue", "finishedOn", "processedOn", "failedReason", "progress"):
        assert absent not in h

    async def process(job: Job[Any, Any]) -> Any:
        await job.update_progress(40)
        await job.update_progress({"step": 2, "of": 3})
        return {"delivered": True}

    async with Worker(queue.name, process, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    h = raw.hgetall(f"{p}:job:{job_id}")
    assert h["state"] == "completed"
    assert json.loads(h["returnvalue"]) == {"delivered": True}
    assert json.loads(h["progress"]) == {"step": 2, "of": 3}
    assert ts <= int(h["processedOn"]) <= int(h["finishedOn"])
    assert h["attemptsMade"] == "0"
    assert raw.zscore(f"{p}:completed", job_id) == int(h["finishedOn"])


async def test_failed_job_hash_has_failed_reason(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    job_id = add_job(raw, queue.name, "explode", json.dumps(None))

    async def process(job: Job[Any, Any]) -> None:
        raise ValueError("the printer is on fire")

    async with Worker(queue.name, process, connection=conn) as worker:
        await wait_for(lambda: worker.failed_count == 1)
    h = raw.hgetall(f"{p}:job:{job_id}")
    assert h["state"] == "failed"
    assert h["failedReason"] == "the printer is on fire"
    assert h["attemptsMade"] == "1"
    assert int(h["finishedOn"]) >= int(h["processedOn"]) >= int(h["timestamp"])
    assert "returnvalue" not in h
    assert raw.zscore(f"{p}:failed", job_id) == int(h["finishedOn"])


async def test_ttl_sets_expire_at_to_timestamp_plus_ttl(queue: Queue[Any, Any], raw: Any) -> None:
    p = prefix(queue.name)
    ts = now_ms()
    job_id = add_job(raw, queue.name, "short-lived", "{}", timestamp=ts, ttl=5_000)
    assert raw.hget(f"{p}:job:{job_id}", "expireAt") == str(ts + 5_000)
    no_ttl = add_job(raw, queue.name, "forever", "{}", timestamp=ts)
    assert raw.hget(f"{p}:job:{no_ttl}", "expireAt") is None
    job = await queue.add("api", None, {"ttl": 2_500})
    assert job is not None
    assert raw.hget(f"{p}:job:{job.id}", "expireAt") == str(job.timestamp + 2_500)


# --------------------------------------------------------------------------- return values


async def test_duplicate_custom_job_id_returns_duplicate(queue: Queue[Any, Any], raw: Any) -> None:
    p = prefix(queue.name)
    first = add_job(raw, queue.name, "order", json.dumps({"v": 1}), custom_id="order-42")
    assert first == "order-42"
    second = add_job(raw, queue.name, "order", json.dumps({"v": 2}), custom_id="order-42")
    assert second == "duplicate"
    assert raw.hget(f"{p}:job:order-42", "data") == json.dumps({"v": 1})
    assert raw.xlen(f"{p}:stream") == 1
    assert raw.get(f"{p}:id") is None  # custom ids never touch the counter
    # Our own API reports the same silent skip as None.
    assert await queue.add("order", {"v": 3}, {"job_id": "order-42"}) is None


BAD_IDS = {
    "257 chars": "x" * 257,
    "control char": "bad\x01id",
    "DEL char": "bad\x7fid",
    "open brace": "a{b",
    "close brace": "a}b",
    "colon": "a:b",
}


async def test_invalid_custom_ids_are_refused_by_the_library(
    queue: Queue[Any, Any], raw: Any
) -> None:
    p = prefix(queue.name)
    for label, bad in BAD_IDS.items():
        assert add_job(raw, queue.name, "j", "{}", custom_id=bad) == "ERR:INVALID_JOB_ID", label
    # 256 characters is the documented maximum and is accepted.
    assert add_job(raw, queue.name, "j", "{}", custom_id="y" * 256) == "y" * 256
    assert raw.xlen(f"{p}:stream") == 1
    assert raw.zcard(f"{p}:scheduled") == 0


async def test_python_api_rejects_invalid_custom_ids_before_sending(
    queue: Queue[Any, Any], raw: Any
) -> None:
    p = prefix(queue.name)
    before = raw.xlen(f"{p}:events") if raw.exists(f"{p}:events") else 0
    for label, bad in BAD_IDS.items():
        with pytest.raises(ValidationError) as info:
            await queue.add("j", None, {"job_id": bad})
        assert info.value.field == "job_id", label
    assert raw.exists(f"{p}:stream") == 0 or raw.xlen(f"{p}:stream") == 0
    events_now = raw.xlen(f"{p}:events") if raw.exists(f"{p}:events") else 0
    assert events_now == before  # nothing reached the server


async def test_documented_count_recipes(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    for i in range(5):
        add_job(raw, queue.name, "j", json.dumps(i))
    add_job(raw, queue.name, "later", "null", delay=60_000)
    add_job(raw, queue.name, "prio", "null", priority=4)
    release = asyncio.Event()
    running: set[str] = set()

    async def hold(job: Job[Any, Any]) -> None:
        running.add(job.id)
        await release.wait()

    async with Worker(queue.name, hold, connection=conn, concurrency=2) as worker:
        await wait_for(lambda: len(running) == 2)
        active = active_count(raw, queue.name)
        stream_len = raw.xlen(f"{p}:stream")
        assert active == 2
        assert stream_len == 5  # waiting + active
        assert raw.zcard(f"{p}:scheduled") == 2  # delayed + prioritized
        counts = await queue.get_job_counts()
        assert counts.waiting == stream_len - active == 3
        assert counts.active == active
        assert counts.delayed == 1 and counts.prioritized == 1
        release.set()
        await wait_for(lambda: worker.completed_count == 6)  # 5 plain + the prioritized one
    assert raw.zcard(f"{p}:completed") == 6
    assert raw.zcard(f"{p}:failed") == 0
    assert raw.xlen(f"{p}:stream") == 0
    assert active_count(raw, queue.name) == 0
    assert raw.zcard(f"{p}:scheduled") == 1


# --------------------------------------------------------------------------- priority encoding


async def test_scheduled_scores_follow_priority_encoding(queue: Queue[Any, Any], raw: Any) -> None:
    p = prefix(queue.name)
    ts = now_ms()
    delayed_prio = add_job(raw, queue.name, "a", "1", timestamp=ts, delay=60_000, priority=3)
    prioritized = add_job(raw, queue.name, "b", "2", timestamp=ts, priority=5)
    delayed_plain = add_job(raw, queue.name, "c", "3", timestamp=ts, delay=60_000)
    top = add_job(raw, queue.name, "d", "4", timestamp=ts, priority=1)

    def score(job_id: str) -> float:
        value = raw.zscore(f"{p}:scheduled", job_id)
        assert value is not None
        return float(value)

    # Delayed jobs wait in band 0 by run time whatever their priority; a second job due in
    # the same ms comes 1/2048 after the first (add order).
    assert score(delayed_prio) == ts + 60_000
    assert score(delayed_plain) == ts + 60_000 + 1 / 2048
    # Runnable prioritized jobs: band + the queue's sequence number (meta prioSeq), FIFO.
    seq = int(raw.hget(f"{p}:meta", "prioSeq"))
    assert score(prioritized) == 5 * SHIFT + seq - 1
    assert score(top) == 1 * SHIFT + seq
    assert 0 < seq < ts  # far below any time: due at once
    states = {j: raw.hget(f"{p}:job:{j}", "state") for j in (delayed_prio, prioritized, top)}
    assert states == {delayed_prio: "delayed", prioritized: "prioritized", top: "prioritized"}
    assert raw.hget(f"{p}:job:{delayed_plain}", "state") == "delayed"

    # Our Queue writes the same scores.
    job = await queue.add("e", None, {"priority": 2, "delay": 30_000})
    assert job is not None
    assert score(job.id) == job.timestamp + 30_000
    # Once due, a delayed job of priority p enters band p behind the jobs already there.
    assert (
        _s_reply(
            raw.fcall(
                "glidemq_promoteJob",
                3,
                f"{p}:stream",
                f"{p}:scheduled",
                f"{p}:events",
                job.id,
                str(now_ms()),
            )
        )
        == "prioritized"
    )
    assert score(job.id) == 2 * SHIFT + seq + 1


def _s_reply(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------- compression


def gz(payload: Any) -> str:
    return "gz:" + base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode()


async def test_gz_data_from_valkey_py_is_decoded_for_the_processor(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    payload = {"report": "q3", "rows": list(range(200)), "note": "é" * 50}
    job_id = add_job(raw, queue.name, "compressed", gz(payload))
    seen: list[Any] = []

    async def process(job: Job[Any, Any]) -> int:
        seen.append(job.data)
        return len(job.data["rows"])

    async with Worker(queue.name, process, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert seen == [payload]
    stored = await queue.get_job(job_id)
    assert stored is not None and stored.data == payload and stored.returnvalue == 200


async def test_queue_compression_writes_gz_prefixed_data(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    payload = {"text": "hello world " * 1000}
    seen: list[Any] = []
    async with Queue(queue.name, connection=conn, compression=True) as cq:
        job = await cq.add("big", payload)
    assert job is not None
    stored = raw.hget(f"{prefix(queue.name)}:job:{job.id}", "data")
    assert stored.startswith("gz:")
    assert json.loads(gzip.decompress(base64.b64decode(stored[3:]))) == payload
    assert len(stored) < len(json.dumps(payload))

    async def process(j: Job[Any, Any]) -> None:
        seen.append(j.data)

    async with Worker(queue.name, process, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    assert seen == [payload]


async def test_payload_over_1_mib_is_refused_and_nothing_is_written(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    first = await queue.add("small", {"ok": True})
    assert first is not None
    counter, stream_len = raw.get(f"{p}:id"), raw.xlen(f"{p}:stream")
    too_big = "x" * 1_048_575  # JSON with quotes: 1,048,577 bytes
    with pytest.raises(PayloadTooLargeError) as info:
        await queue.add("huge", too_big)
    assert info.value.size == 1_048_577 and info.value.limit == 1_048_576
    # The limit applies before compression, although this would compress to almost nothing.
    async with Queue(queue.name, connection=conn, compression=True) as cq:
        with pytest.raises(PayloadTooLargeError):
            await cq.add("huge", too_big)
    with pytest.raises(PayloadTooLargeError) as bulk_info:
        await queue.add_bulk([("fine", 1), ("huge", too_big)])
    assert bulk_info.value.field == "jobs[1].data"
    assert raw.get(f"{p}:id") == counter
    assert raw.xlen(f"{p}:stream") == stream_len
    assert raw.exists(f"{p}:job:{int(first.id) + 1}") == 0

    # Exactly 1,048,576 bytes of JSON is allowed.
    at_limit = "y" * 1_048_574
    job = await queue.add("edge", at_limit)
    assert job is not None
    assert len(raw.hget(f"{p}:job:{job.id}", "data")) == 1_048_576


# --------------------------------------------------------------------------- deduplication


async def test_dedup_simple_skips_while_first_job_is_not_finished(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    ts = now_ms()
    first = dedup_job(raw, queue.name, "user-7", 0, "simple", "sync", '{"n":1}', timestamp=ts)
    assert first not in ("skipped", "duplicate") and not first.startswith("ERR")
    assert raw.hget(f"{p}:dedup", "user-7") == f"{first}:{ts}"
    assert dedup_job(raw, queue.name, "user-7", 0, "simple", "sync", '{"n":2}') == "skipped"
    assert raw.xlen(f"{p}:stream") == 1

    async with Worker(queue.name, _recorder, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 1)
        third = dedup_job(raw, queue.name, "user-7", 0, "simple", "sync", '{"n":3}')
        assert third not in ("skipped", first)
        await wait_for(lambda: worker.completed_count == 2)
    assert raw.hget(f"{p}:job:{third}", "data") == '{"n":3}'
    assert raw.hget(f"{p}:dedup", "user-7").startswith(f"{third}:")


async def test_dedup_throttle_skips_within_ttl_then_creates(
    queue: Queue[Any, Any], raw: Any
) -> None:
    p = prefix(queue.name)
    t0 = now_ms()
    first = dedup_job(raw, queue.name, "ping", 200, "throttle", "t", "1", timestamp=t0)
    assert first not in ("skipped", "duplicate")
    # Inside the window (by the timestamps the producer sends) the add is skipped ...
    assert dedup_job(raw, queue.name, "ping", 200, "throttle", "t", "2", timestamp=t0) == "skipped"
    skipped = dedup_job(raw, queue.name, "ping", 200, "throttle", "t", "3", timestamp=t0 + 199)
    assert skipped == "skipped"
    assert raw.xlen(f"{p}:stream") == 1

    # ... and once real time has passed the ttl, a new job is created.
    def try_add() -> str | None:
        reply = dedup_job(raw, queue.name, "ping", 200, "throttle", "t", "4")
        return None if reply == "skipped" else reply

    second = await wait_for(try_add, timeout=5)
    assert second != first
    assert raw.xlen(f"{p}:stream") == 2
    assert int(raw.hget(f"{p}:dedup", "ping").split(":")[1]) >= t0 + 200


async def test_dedup_debounce_replaces_the_delayed_job(queue: Queue[Any, Any], raw: Any) -> None:
    p = prefix(queue.name)
    first = dedup_job(raw, queue.name, "search", 0, "debounce", "q", '"a"', delay=5_000)
    assert raw.hget(f"{p}:job:{first}", "state") == "delayed"
    second = dedup_job(raw, queue.name, "search", 0, "debounce", "q", '"ab"', delay=5_000)
    assert second not in ("skipped", "duplicate", first)
    assert raw.exists(f"{p}:job:{first}") == 0
    assert raw.zrange(f"{p}:scheduled", 0, -1) == [second]
    assert raw.hget(f"{p}:job:{second}", "data") == '"ab"'
    assert raw.hget(f"{p}:dedup", "search").startswith(f"{second}:")


# --------------------------------------------------------------------------- pause / resume


def pause(r: Any, queue_name: str) -> Any:
    p = prefix(queue_name)
    return r.fcall("glidemq_pause", 2, f"{p}:meta", f"{p}:events")


def resume(r: Any, queue_name: str) -> Any:
    p = prefix(queue_name)
    return r.fcall("glidemq_resume", 2, f"{p}:meta", f"{p}:events")


async def test_pause_and_resume_via_fcall_control_workers(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    pause(raw, queue.name)
    assert raw.hget(f"{p}:meta", "paused") == "1"
    assert await queue.is_paused()
    job_id = add_job(raw, queue.name, "held", "null")
    done: list[str] = []

    async def process(job: Job[Any, Any]) -> None:
        done.append(job.id)

    async with Worker(queue.name, process, connection=conn, block_timeout=200):
        await asyncio.sleep(1.0)  # a negative: give the worker time to (wrongly) take it
        assert done == []
        assert raw.hget(f"{p}:job:{job_id}", "state") == "waiting"
        resume(raw, queue.name)
        assert raw.hget(f"{p}:meta", "paused") == "0"
        assert not await queue.is_paused()
        await wait_for(lambda: done == [job_id])


async def test_pause_via_fcall_stops_an_idle_blocking_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    done: list[str] = []

    async def process(job: Job[Any, Any]) -> None:
        done.append(job.id)

    async with Worker(queue.name, process, connection=conn, block_timeout=3000):
        await asyncio.sleep(0.3)  # let the worker reach its blocking read on an empty stream
        pause(raw, queue.name)
        job_id = add_job(raw, queue.name, "held", "null")
        await asyncio.sleep(1.0)
        assert done == []
        assert raw.hget(f"{p}:job:{job_id}", "state") == "waiting"
        resume(raw, queue.name)
        await wait_for(lambda: done == [job_id])


# --------------------------------------------------------------------------- misc protocol


async def test_version_function_returns_library_version(queue: Queue[Any, Any], raw: Any) -> None:
    assert raw.fcall("glidemq_version", 1, "{glidemq}:_") == str(LIBRARY_VERSION)


async def test_worker_creates_consumer_group_named_workers(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    stream = f"{prefix(queue.name)}:stream"
    async with Worker(queue.name, _recorder, connection=conn):
        groups = raw.xinfo_groups(stream)
        assert [g["name"] for g in groups] == ["workers"]
        # The document's idempotent creation recipe agrees that it exists.
        with pytest.raises(valkey.exceptions.ResponseError, match="BUSYGROUP"):
            raw.xgroup_create(stream, "workers", "$", mkstream=True)


async def test_events_stream_is_capped_near_1000(queue: Queue[Any, Any], raw: Any) -> None:
    jobs = await queue.add_bulk([("e", i) for i in range(3000)])
    assert len(jobs) == 3000
    events = f"{prefix(queue.name)}:events"
    length = raw.xlen(events)
    assert 1000 <= length <= 1100, length
    last = raw.xrevrange(events, count=1)[0][1]
    assert last["event"] == "added" and last["jobId"] == jobs[-1].id  # type: ignore[union-attr]


async def test_queue_writes_opts_json_with_wire_camel_case_names(
    queue: Queue[Any, Any], raw: Any
) -> None:
    opts = JobOptions(
        attempts=4,
        backoff=Backoff(type="exponential", delay=250),
        remove_on_complete=True,
        remove_on_fail=KeepJobs(count=10),
        timeout=5_000,
        job_id="camel-1",
    )
    job = await queue.add("camel", {"a": 1}, opts)
    assert job is not None
    h = raw.hgetall(f"{prefix(queue.name)}:job:{job.id}")
    assert json.loads(h["opts"]) == {
        "attempts": 4,
        "backoff": {"type": "exponential", "delay": 250},
        "removeOnComplete": True,
        "removeOnFail": {"count": 10},
        "timeout": 5_000,
        "jobId": "camel-1",
    }
    assert h["maxAttempts"] == "4"


async def test_wire_opts_attempts_and_backoff_are_honoured(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    opts = json.dumps({"attempts": 3, "backoff": {"type": "fixed", "delay": 200}})
    job_id = add_job(raw, queue.name, "flaky", "null", opts, max_attempts=3)
    tries: list[float] = []

    async def flaky(job: Job[Any, Any]) -> str:
        tries.append(time.monotonic())
        if len(tries) < 3:
            raise RuntimeError(f"try {len(tries)} failed")
        return "third time lucky"

    async with Worker(queue.name, flaky, connection=conn, promotion_interval=20) as worker:
        await wait_for(lambda: worker.completed_count == 1)
    h = raw.hgetall(f"{p}:job:{job_id}")
    assert h["state"] == "completed"
    assert h["attemptsMade"] == "2"
    assert json.loads(h["returnvalue"]) == "third time lucky"
    assert len(tries) == 3
    # The fixed backoff of 200 ms from the wire opts separated the tries.
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(tries))


async def test_wire_remove_on_complete_deletes_the_job(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    p = prefix(queue.name)
    gone = add_job(raw, queue.name, "tmp", "null", json.dumps({"removeOnComplete": True}))
    kept = add_job(raw, queue.name, "keep", "null")
    async with Worker(queue.name, _recorder, connection=conn) as worker:
        await wait_for(lambda: worker.completed_count == 2)
    assert raw.exists(f"{p}:job:{gone}") == 0
    assert raw.hget(f"{p}:job:{kept}", "state") == "completed"
    assert raw.zrange(f"{p}:completed", 0, -1) == [kept]
