"""Groups: concurrency per group key with a FIFO wait set, group rate limits, token buckets
with per-job costs (a cost over the capacity is refused at add time, or dead-lettered at fetch
time), the wire form of these options, and slot accounting when a job leaves early or twice.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import valkey
from valkey.cluster import ValkeyCluster

from glidemq import (
    ConnectionOptions,
    CostExceedsCapacityError,
    Job,
    JobOptions,
    Queue,
    RateLimit,
    TokenBucket,
    ValidationError,
    Worker,
)
from glidemq.client.context import now_ms
from tests.helpers import FAST, job_state, wait_for, wait_state


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


def wire_add(r: Any, queue: Queue[Any, Any], name: str, group: list[str]) -> str:
    """FCALL glidemq_addJob as the wire protocol documents it; `group` = args 9-15."""
    k = queue.keys
    args = [name, "{}", "{}", str(now_ms()), "0", "0", "", "0", *group, "0", ""]
    return str(r.fcall("glidemq_addJob", 4, k.id, k.stream, k.scheduled, k.events, *args))


async def _completed(queue: Queue[Any, Any], n: int) -> bool:
    return (await queue.get_job_counts()).completed == n


async def test_group_concurrency_is_never_exceeded_across_workers(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    limits = {"a": 2, "b": 3}
    running: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)
    done = 0

    async def run(job: Job[Any, Any]) -> None:
        nonlocal done
        g = job.data["g"]
        running[g] += 1
        peak[g] = max(peak[g], running[g])
        await asyncio.sleep(0.01)
        running[g] -= 1
        done += 1

    items = [
        ("job", {"g": g, "i": i}, {"group_key": g, "group_concurrency": limits[g]})
        for i in range(15)
        for g in limits
    ]
    await queue.add_bulk(items)
    w1 = Worker(queue.name, run, connection=conn, concurrency=10, **FAST)
    w2 = Worker(queue.name, run, connection=conn, concurrency=10, **FAST)
    async with w1, w2:
        await wait_for(lambda: done == 30, timeout=20)
    assert peak["a"] <= 2 and peak["b"] <= 3
    assert peak["b"] >= 2  # a group's jobs do run side by side
    counts = await queue.get_job_counts()
    assert (counts.completed, counts.waiting, counts.active) == (30, 0, 0)
    ctx = await queue._context()
    for g in limits:
        key = queue.keys.base + f"group:{g}"
        assert await ctx.command(lambda c, key=key: c.hget(key, "active")) == b"0"


async def test_jobs_of_a_group_start_in_the_order_they_were_added(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    """Slots go out in the order added: the stream entries the jobs were handed out from grow
    in that order. When their processors begin is not promised (ADVANCED.md): a worker's
    concurrent calls reply in any order, and an idle worker's blocking read starts its
    jobs in a second call, after which a completion may already have started a later one."""
    entries: dict[str, list[tuple[tuple[int, int], int]]] = defaultdict(list)

    async def run(job: Job[Any, Any]) -> None:
        ms, seq = (job.entry_id or "").split("-")
        entries[job.data["g"]].append(((int(ms), int(seq)), job.data["i"]))
        await asyncio.sleep(0.005 * (job.data["i"] % 3))

    items = [
        ("job", {"g": g, "i": i}, {"group_key": g, "group_concurrency": 2})
        for i in range(12)
        for g in ("x", "y")
    ]
    await queue.add_bulk(items)
    async with Worker(queue.name, run, connection=conn, concurrency=8, **FAST):
        await wait_for(lambda: _completed(queue, 24), timeout=20)
    for g in ("x", "y"):
        assert [i for _, i in sorted(entries[g])] == list(range(12))


async def test_a_job_read_later_does_not_overtake_a_woken_one_of_its_group(
    queue: Queue[Any, Any],
) -> None:
    """Driven call by call: a freed slot wakes a parked job, which re-enters the stream at
    its tail, behind a later job of the group not read yet; the group then frees its last
    slot. The later job must not start first, and the counters come back to zero."""
    ctx = await queue._context()
    opts = {"group_key": "g", "group_concurrency": 2}
    first = [await queue.add("j", i, opts) for i in range(3)]
    await ctx.command(lambda c: c.xgroup_create(queue.keys.stream, "workers", "0"))
    group_key = queue.keys.base + "group:g"

    async def call(fetch: int, done: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
        args = [str(now_ms()), "c1", str(fetch), "1", str(len(done or []))]
        for job_id, entry in done or []:
            args += [job_id, entry, "1", "-1", "0"]
        reply = await ctx.fcall("glidemq_completeAndFetchNext", ctx.fetch_keys, args)
        got = reply[1]
        return [(got[i + 1].decode(), got[i].decode()) for i in range(0, len(got), 3)]

    running = await call(3)  # jobs 0 and 1 start, job 2 parks
    assert [job_id for job_id, _ in running] == [j.id for j in first[:2] if j is not None]
    later = await queue.add("j", 3, opts)  # its entry sits ahead of job 2's next one
    assert later is not None and first[2] is not None
    assert await call(0, running[:1]) == []  # job 2 is woken holding the freed slot
    assert await call(0, running[1:]) == []  # nothing parked: this slot goes to the group
    started: list[tuple[str, str]] = []
    for _ in range(4):  # one entry per call, so each decision is made on its own
        started += await call(1)
    assert [job_id for job_id, _ in started] == [first[2].id, later.id]
    assert await ctx.command(lambda c: c.hmget(group_key, ["active", "reserved"])) == [
        b"2",
        b"0",
    ]
    await call(0, started)
    assert await ctx.command(lambda c: c.hmget(group_key, ["active", "reserved"])) == [
        b"0",
        b"0",
    ]


async def test_a_woken_job_handed_back_unstarted_keeps_its_place(
    queue: Queue[Any, Any], raw: Any
) -> None:
    """A woken job read by a blocking read and handed back before it started (its worker
    closed) goes back to the stream still holding its slot: the next parked job stays put."""
    ctx = await queue._context()
    opts = {"group_key": "g", "group_concurrency": 2}
    jobs = [await queue.add("j", i, opts) for i in range(4)]
    ids = [j.id for j in jobs if j is not None]
    await ctx.command(lambda c: c.xgroup_create(queue.keys.stream, "workers", "0"))
    fetch = [str(now_ms()), "c1", "4", "0", "0"]
    got = (await ctx.fcall("glidemq_completeAndFetchNext", ctx.fetch_keys, fetch))[1]
    assert [got[1].decode(), got[4].decode()] == ids[:2]  # jobs 2 and 3 park
    done = [str(now_ms()), "c1", "0", "0", "1", ids[0], got[0].decode(), "1", "-1", "0"]
    await ctx.fcall("glidemq_completeAndFetchNext", ctx.fetch_keys, done)  # job 2 woken
    read = raw.xreadgroup("workers", "c2", {queue.keys.stream: ">"}, count=1)
    entry, fields = read[0][1][0]
    assert fields["id"] == ids[2]
    handed = await ctx.fcall(
        "glidemq_deferActive", [queue.keys.stream, queue.keys.events], ["c2", entry, ids[2]]
    )
    assert handed == 1
    assert await job_state(queue, ids[3]) == "group-waiting"
    again = [str(now_ms()), "c1", "4", "0", "0"]
    got = (await ctx.fcall("glidemq_completeAndFetchNext", ctx.fetch_keys, again))[1]
    assert [got[i + 1].decode() for i in range(0, len(got), 3)] == [ids[2]]
    assert await job_state(queue, ids[3]) == "group-waiting"
    group = raw.hgetall(queue.keys.base + "group:g")
    assert (group["active"], group["reserved"]) == ("2", "0")


async def test_group_waiting_jobs_are_counted_and_listed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    release = asyncio.Event()

    async def run(job: Job[Any, Any]) -> None:
        await release.wait()

    opts = JobOptions(group_key="g", group_concurrency=1)
    jobs = [await queue.add("job", i, opts) for i in range(3)]
    assert all(j is not None and j.group_key == "g" for j in jobs)
    async with Worker(queue.name, run, connection=conn, concurrency=5, **FAST):
        assert jobs[1] is not None and jobs[2] is not None
        await wait_state(queue, jobs[1].id, "group-waiting")
        parked = await wait_state(queue, jobs[2].id, "group-waiting")
        assert parked.group_key == "g" and parked.ordering_key == "g"
        counts = await queue.get_job_counts()
        assert (counts.active, counts.waiting, counts.group_waiting) == (1, 2, 2)
        listed = await queue.get_jobs("group-waiting")
        assert [j.id for j in listed] == [jobs[1].id, jobs[2].id]
        assert await queue.get_jobs("waiting") == []  # each job is listed in its own state
        assert await parked.is_waiting() and not await parked.is_delayed()
        release.set()
        await wait_for(lambda: _completed(queue, 3), timeout=10)
    assert (await queue.get_job_counts()).waiting == 0


async def test_group_rate_limit_spaces_the_group_out_but_not_other_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    starts: dict[str, list[float]] = defaultdict(list)

    async def run(job: Job[Any, Any]) -> None:
        starts[job.name].append(time.monotonic())

    opts = JobOptions(group_key="api", group_concurrency=10, group_rate_limit=RateLimit(3, 250))
    await queue.add_bulk([("limited", i, opts) for i in range(12)])
    async with Worker(queue.name, run, connection=conn, concurrency=10, **FAST):
        await wait_for(lambda: len(starts["limited"]) >= 1, timeout=10)
        await queue.add_bulk([("free", i) for i in range(5)])
        await wait_for(lambda: _completed(queue, 17), timeout=20)
    got = starts["limited"]
    elapsed_ms = (max(got) - min(got)) * 1000 + 5
    assert len(got) <= 3 * (math.ceil(elapsed_ms / 250) + 1)
    # the plain jobs were not held back behind the limited group
    assert max(starts["free"]) < max(got)


async def test_rate_limited_jobs_are_counted_as_delayed_and_listed(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    started: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        started.append(job.id)

    opts = JobOptions(group_key="slow", group_concurrency=5, group_rate_limit=RateLimit(1, 60_000))
    jobs = [await queue.add("job", i, opts) for i in range(3)]
    ids = [j.id for j in jobs if j is not None]
    async with Worker(queue.name, run, connection=conn, concurrency=5, **FAST):
        for job_id in ids[1:]:
            await wait_state(queue, job_id, "rate-limited")
    assert started == ids[:1]
    counts = await queue.get_job_counts()
    assert (counts.delayed, counts.rate_limited, counts.waiting) == (2, 2, 0)
    assert await queue.count() == 2
    listed = await queue.get_jobs("rate-limited")
    assert sorted(j.id for j in listed) == sorted(ids[1:])
    assert await queue.get_jobs("delayed") == []
    assert await listed[0].is_delayed() and not await listed[0].is_waiting()


async def test_token_bucket_admits_jobs_as_tokens_refill(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    starts: list[tuple[float, float]] = []

    async def run(job: Job[Any, Any]) -> None:
        starts.append((time.monotonic(), job.cost or 1.0))

    bucket = TokenBucket(capacity=2, refill_rate=10)  # one token per 100 ms
    jobs = [
        ("job", i, JobOptions(group_key="t", group_concurrency=5, token_bucket=bucket, cost=c))
        for i, c in enumerate([1, 1, 0.5, 1.5, 1, 1, 2, 1])
    ]
    await queue.add_bulk(jobs)
    async with Worker(queue.name, run, connection=conn, concurrency=10, **FAST):
        await wait_for(lambda: _completed(queue, 8), timeout=20)
    spent = sum(cost for _, cost in starts)
    elapsed = max(t for t, _ in starts) - min(t for t, _ in starts)
    # tokens taken never exceed the capacity plus what refilled meanwhile
    assert spent <= 2 + 10 * (elapsed + 0.05), (spent, elapsed)
    assert sorted(cost for _, cost in starts) == [0.5, 1, 1, 1, 1, 1, 1.5, 2]


async def test_cost_over_capacity_is_refused_when_added(queue: Queue[Any, Any], raw: Any) -> None:
    bucket = TokenBucket(capacity=2, refill_rate=1)
    with pytest.raises(CostExceedsCapacityError) as info:
        await queue.add("big", None, {"group_key": "g", "token_bucket": bucket, "cost": 3})
    assert isinstance(info.value, ValidationError)
    assert (info.value.cost, info.value.capacity) == (3, 2)
    # the server refuses it too (a producer in another language): nothing is written
    reply = wire_add(raw, queue, "big", ["g", "0", "0", "0", "2000", "1000", "3000"])
    assert reply == "ERR:COST_EXCEEDS_CAPACITY"
    reply = wire_add(raw, queue, "one", ["g", "0", "0", "0", "500", "1000", "0"])
    assert reply == "ERR:COST_EXCEEDS_CAPACITY"  # the default cost is one token
    assert (await queue.get_job_counts()).waiting == 0
    # group arguments without an ordering key are refused, not ignored
    assert wire_add(raw, queue, "x", ["", "3", "0", "0", "0", "0", "0"]) == "ERR:BAD_OPTION"
    assert wire_add(raw, queue, "x", ["k", "0", "5", "0", "0", "0", "0"]) == "ERR:BAD_OPTION"


async def test_cost_over_a_shrunken_capacity_goes_to_the_dead_letter_set(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        done.append(job.name)

    big = await queue.add(
        "big", None, JobOptions(group_key="g", token_bucket=TokenBucket(3, 1), cost=2.5)
    )
    # each add restates its group's settings: the bucket is smaller from now on
    small = await queue.add(
        "small", None, JobOptions(group_key="g", token_bucket=TokenBucket(1, 1))
    )
    assert big is not None and small is not None
    async with Worker(queue.name, run, connection=conn, **FAST):
        await wait_state(queue, small.id, "completed")
    dead = await queue.get_dead_letter_jobs()
    assert [j.id for j in dead] == [big.id]
    assert dead[0].state == "failed"
    assert "exceeds the capacity 1" in (dead[0].failed_reason or "")
    assert done == ["small"]


async def test_wire_producer_group_options_are_enforced(
    queue: Queue[Any, Any], conn: ConnectionOptions, raw: Any
) -> None:
    ids = [wire_add(raw, queue, "w", ["tenant", "2", "0", "0", "0", "0", "0"]) for _ in range(6)]
    h = raw.hgetall(f"{queue.keys.base}job:{ids[0]}")
    assert h["groupKey"] == "tenant" and "orderingKey" not in h
    group = raw.hgetall(f"{queue.keys.base}group:tenant")
    assert group["maxConcurrency"] == "2"
    # groupConcurrency 0 (or 1) makes an ordering key: numbered in the order added
    seq = [wire_add(raw, queue, "o", ["acct", "0", "0", "0", "0", "0", "0"]) for _ in range(2)]
    fields = [raw.hgetall(f"{queue.keys.base}job:{i}") for i in seq]
    assert [(f["orderingKey"], f["orderingSeq"]) for f in fields] == [("acct", "1"), ("acct", "2")]
    running = 0
    peak = 0

    async def run(job: Job[Any, Any]) -> None:
        nonlocal running, peak
        if job.name != "w":
            return
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    async with Worker(queue.name, run, connection=conn, concurrency=6, **FAST):
        await wait_for(lambda: _completed(queue, 8), timeout=10)
    assert peak == 2


async def test_a_reclaimed_job_that_completes_late_frees_one_slot_only(
    queue: Queue[Any, Any],
) -> None:
    """Driven call by call: one worker takes the job and goes silent, stall recovery hands it
    to another, which completes it; then the first one's late completion arrives."""
    ctx = await queue._context()
    job = await queue.add("j", None, {"group_key": "g", "group_concurrency": 2})
    assert job is not None
    await ctx.command(lambda c: c.xgroup_create(queue.keys.stream, "workers", "0"))
    group_key = queue.keys.base + "group:g"

    async def active() -> int:
        return int(await ctx.command(lambda c: c.hget(group_key, "active")) or 0)

    async def fetch(consumer: str) -> str:
        reply = await ctx.fcall(
            "glidemq_completeAndFetchNext",
            ctx.fetch_keys,
            [str(now_ms()), consumer, "1", "0", "0"],
        )
        return reply[1][0].decode()

    async def complete(consumer: str, entry: str) -> str:
        reply = await ctx.fcall(
            "glidemq_completeAndFetchNext",
            ctx.fetch_keys,
            [str(now_ms()), consumer, "0", "0", "1", job.id, entry, "1", "-1", "0"],
        )
        return str(reply[0][0].decode())

    first = await fetch("c1")
    assert await active() == 1
    reclaim = [str(now_ms()), "c2", "0", "0-0", "10", "5", "0", "-1", "0", "0"]
    assert (await ctx.fcall("glidemq_reclaimStalled", ctx.fail_keys, reclaim))[1] == 1
    assert await active() == 0
    second = await fetch("c2")
    assert await active() == 1
    assert await complete("c2", second) == "ok"
    assert await active() == 0
    assert await complete("c1", first) == "stale"
    assert await active() == 0


async def test_removing_or_draining_waiting_group_jobs_gives_their_slots_back(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    release = asyncio.Event()
    ran: list[int] = []

    async def run(job: Job[Any, Any]) -> None:
        ran.append(job.data)
        await release.wait()

    opts = JobOptions(group_key="g", group_concurrency=2)
    jobs = [await queue.add("job", i, opts) for i in range(5)]
    assert all(j is not None for j in jobs)
    ids = [j.id for j in jobs if j is not None]
    async with Worker(queue.name, run, connection=conn, concurrency=5, **FAST):
        await wait_state(queue, ids[4], "group-waiting")
        await queue.remove(ids[2])  # parked: out of the wait set
        assert (await queue.get_job_counts()).waiting == 2
        assert await queue.drain() == 2
        assert (await queue.get_job_counts()).waiting == 0
        release.set()
        await wait_for(lambda: _completed(queue, 2), timeout=10)
        # the group is free again: two new jobs run side by side at once
        release.clear()
        await queue.add_bulk([("job", i, opts) for i in (10, 11)])
        await wait_for(lambda: len(ran) == 4, timeout=10)
        release.set()
    assert sorted(ran) == [0, 1, 10, 11]


def test_group_options_are_validated() -> None:
    with pytest.raises(ValidationError, match="group_concurrency"):
        JobOptions(group_concurrency=2)
    with pytest.raises(ValidationError, match="either"):
        JobOptions(group_key="a", ordering_key="a")
    with pytest.raises(ValidationError, match="cost"):
        JobOptions(group_key="a", cost=1)
    with pytest.raises(ValidationError, match="group_key"):
        JobOptions(group_key="")
    with pytest.raises(ValidationError, match=r"token_bucket\.capacity"):
        JobOptions.coerce({"group_key": "a", "token_bucket": {"capacity": 0, "refill_rate": 1}})
    with pytest.raises(ValidationError, match=r"group_rate_limit\.nope"):
        JobOptions.coerce({"group_key": "a", "group_rate_limit": {"max": 1, "nope": 2}})
    opts = JobOptions.coerce({"group_key": "a", "group_rate_limit": {"max": 2, "duration": 10}})
    assert opts.group_rate_limit == RateLimit(2, 10)
    assert json.loads(json.dumps(opts.to_wire()))["groupRateLimit"] == {"max": 2, "duration": 10}
