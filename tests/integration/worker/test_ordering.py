"""Ordering keys (one job at a time per key, in the order added, across all workers; a job
waiting for its retry keeps the key) and LIFO jobs (newest first)."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from typing import Any

from glidemq import Backoff, ConnectionOptions, Job, JobOptions, Queue, Worker
from tests.helpers import FAST, wait_for, wait_state


async def _finished(queue: Queue[Any, Any], n: int) -> bool:
    c = await queue.get_job_counts()
    return c.completed + c.failed == n


async def test_each_key_runs_in_order_and_alone_while_keys_run_in_parallel(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    keys, per_key = 6, 15
    started: dict[str, list[int]] = defaultdict(list)
    running: dict[str, int] = defaultdict(int)
    overlaps: list[tuple[str, int]] = []
    total_running = 0
    total_peak = 0

    async def run(job: Job[Any, Any]) -> None:
        nonlocal total_running, total_peak
        key, seq = job.data
        started[key].append(seq)
        running[key] += 1
        total_running += 1
        total_peak = max(total_peak, total_running)
        if running[key] > 1:
            overlaps.append((key, seq))
        await asyncio.sleep(random.random() * 0.004)
        running[key] -= 1
        total_running -= 1

    items = [
        ("job", (f"k{k}", s), JobOptions(ordering_key=f"k{k}"))
        for s in range(per_key)
        for k in range(keys)
    ]
    await queue.add_bulk(items)
    workers = [Worker(queue.name, run, connection=conn, concurrency=8, **FAST) for _ in range(3)]
    async with workers[0], workers[1], workers[2]:
        await wait_for(lambda: _finished(queue, keys * per_key), timeout=30)
    assert not overlaps
    for k in range(keys):
        assert started[f"k{k}"] == list(range(per_key))
    assert total_peak > 1  # different keys did run side by side


async def test_a_key_waits_for_its_head_jobs_retry(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    log: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        log.append(f"{job.data}:{job.attempts_made}")
        if job.data in ("a", "d") and job.attempts_made == 0:
            raise ValueError("first try fails")

    retry = JobOptions(ordering_key="k", attempts=2, backoff=Backoff("fixed", 300))
    once = JobOptions(ordering_key="k")
    await queue.add("j", "a", retry)  # fails, retries after 300 ms: b and c wait for it
    await queue.add("j", "b", once)
    await queue.add("j", "c", once)
    await queue.add("j", "d", once)  # fails for good: the key moves on to e
    await queue.add("j", "e", once)
    async with Worker(queue.name, run, connection=conn, concurrency=5, **FAST):
        await wait_for(lambda: _finished(queue, 5), timeout=15)
    assert log == ["a:0", "a:1", "b:0", "c:0", "d:0", "e:0"]
    counts = await queue.get_job_counts()
    assert (counts.completed, counts.failed) == (4, 1)


async def test_order_is_kept_with_delays_and_priorities(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    order: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        order.append(job.data)

    await queue.add("j", "late", JobOptions(ordering_key="k", delay=300))
    await queue.add("j", "low", JobOptions(ordering_key="k", priority=7))
    await queue.add("j", "plain", JobOptions(ordering_key="k"))
    await queue.add("j", "other", JobOptions(ordering_key="other"))
    async with Worker(queue.name, run, connection=conn, concurrency=5, **FAST):
        await wait_for(lambda: _finished(queue, 4), timeout=10)
    assert [x for x in order if x != "other"] == ["late", "low", "plain"]
    assert order[0] == "other"  # another key is not held up by k's delayed head


async def test_removing_a_waiting_job_of_a_key_lets_the_next_run(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    release = asyncio.Event()
    order: list[int] = []

    async def run(job: Job[Any, Any]) -> None:
        order.append(job.data)
        if job.data == 0:
            await release.wait()

    opts = JobOptions(ordering_key="k")
    jobs = [await queue.add("j", i, opts) for i in range(4)]
    ids = [j.id for j in jobs if j is not None]
    async with Worker(queue.name, run, connection=conn, concurrency=4, **FAST):
        await wait_state(queue, ids[1], "group-waiting")
        await wait_state(queue, ids[2], "group-waiting")
        await queue.remove(ids[1])
        revoked = await queue.revoke(ids[2])
        assert revoked == "revoked"
        release.set()
        await wait_for(lambda: _finished(queue, 3), timeout=10)
    assert order == [0, 3]


async def test_lifo_jobs_run_newest_first(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    jobs = [await queue.add("j", i, JobOptions(lifo=True)) for i in range(8)]
    ids = [j.id for j in jobs if j is not None]
    counts = await queue.get_job_counts()
    assert counts.waiting == 8
    waiting = await queue.get_jobs("waiting")
    assert [j.id for j in waiting] == ids[::-1]
    await queue.remove(ids[3])
    assert (await queue.get_job_counts()).waiting == 7
    order: list[int] = []

    async def run(job: Job[Any, Any]) -> None:
        order.append(job.data)

    async with Worker(queue.name, run, connection=conn, concurrency=1, **FAST):
        await wait_for(lambda: len(order) == 7, timeout=10)
        # added while the worker idles: still taken (the promotion loop admits it)
        await queue.add("j", 99, JobOptions(lifo=True))
        await wait_for(lambda: len(order) == 8, timeout=10)
    assert order == [7, 6, 5, 4, 2, 1, 0, 99]


async def test_plain_jobs_go_before_lifo_jobs_and_drain_removes_lifo_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("j", f"lifo{i}", {"lifo": True}) for i in range(3)])
    await queue.add_bulk([("j", f"plain{i}", None) for i in range(2)])
    order: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        order.append(job.data)

    async with Worker(queue.name, run, connection=conn, concurrency=1, **FAST):
        await wait_for(lambda: len(order) == 5, timeout=10)
    assert order == ["plain0", "plain1", "lifo2", "lifo1", "lifo0"]
    await queue.add_bulk([("j", i, {"lifo": True}) for i in range(4)])
    assert await queue.drain() == 4
    assert (await queue.get_job_counts()).waiting == 0


async def test_a_debounced_job_of_a_key_gives_its_turn_to_the_one_replacing_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    release = asyncio.Event()
    order: list[str] = []

    async def run(job: Job[Any, Any]) -> None:
        order.append(job.data)
        if job.data == "first":
            await release.wait()

    key = {"ordering_key": "doc"}
    debounce = {**key, "delay": 200, "deduplication": {"id": "save", "mode": "debounce"}}
    async with Worker(queue.name, run, connection=conn, concurrency=4, **FAST):
        first = await queue.add("j", "first", key)
        assert first is not None
        await wait_state(queue, first.id, "active")
        replaced = await queue.add("j", "draft", debounce)
        final = await queue.add("j", "final", debounce)  # deletes "draft" (delayed)
        assert replaced is not None and final is not None
        assert await queue.get_job(replaced.id) is None
        assert final.ordering_key == "doc"
        release.set()
        await wait_state(queue, final.id, "completed")
    assert order == ["first", "final"]
