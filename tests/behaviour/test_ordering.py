"""The order jobs run in: FIFO, priorities, LIFO, ordering keys, groups and group rate
limits, the same on standalone Valkey, the cluster and in memory."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from glidemq import Backoff, JobOptions, RateLimit, TokenBucket
from tests.behaviour.conftest import GUARD, Backend
from tests.helpers import wait_for, wait_state


def _recorder(sink: list[Any]) -> Any:
    async def record(job: Any) -> None:
        sink.append(job.data)

    return record


async def test_plain_jobs_run_first_in_first_out(backend: Backend) -> None:
    seen: list[int] = []
    await backend.queue.add_bulk([("j", n) for n in range(12)])
    for n in range(12, 15):
        await backend.queue.add("j", n)
    async with backend.worker(_recorder(seen)):
        await wait_for(lambda: len(seen) == 15)
    assert seen == list(range(15))


async def test_priorities_run_first_and_in_order_of_adding_within_one(backend: Backend) -> None:
    seen: list[str] = []
    for n in range(3):
        await backend.queue.add("j", f"low-{n}", {"priority": 5})
        await backend.elapse(1)
        await backend.queue.add("j", f"high-{n}", {"priority": 1})
        await backend.elapse(1)
    await backend.queue.add("j", "plain")
    async with backend.worker(_recorder(seen)):
        await wait_for(lambda: len(seen) == 7)
    assert seen == ["plain", "high-0", "high-1", "high-2", "low-0", "low-1", "low-2"]


async def test_one_priority_added_in_one_millisecond_runs_first_in_first_out(
    backend: Backend,
) -> None:
    # no clock step between the adds: equal times must not fall back to id order
    seen: list[str] = []
    await backend.queue.add_bulk([("j", f"b{n:02d}", JobOptions(priority=3)) for n in range(12)])
    for n in range(5):
        await backend.queue.add("j", f"s{n}", {"priority": 3})
    async with backend.worker(_recorder(seen)):
        await wait_for(lambda: len(seen) == 17)
    assert seen == [f"b{n:02d}" for n in range(12)] + [f"s{n}" for n in range(5)]


async def test_lifo_jobs_run_newest_first_after_plain_before_prioritized(
    backend: Backend,
) -> None:
    q = backend.queue
    seen: list[str] = []
    await q.add("j", "prioritized", {"priority": 3})
    await q.add("j", "plain-0")
    for n in range(3):
        await q.add("j", f"lifo-{n}", JobOptions(lifo=True))
    await q.add("j", "plain-1")
    counts = await q.get_job_counts()
    assert (counts.waiting, counts.prioritized) == (5, 1)
    waiting = [j.data for j in await q.get_jobs("waiting")]
    assert waiting == ["plain-0", "plain-1", "lifo-2", "lifo-1", "lifo-0"]
    async with backend.worker(_recorder(seen)):
        await wait_for(lambda: len(seen) == 6)
    assert seen == ["plain-0", "plain-1", "lifo-2", "lifo-1", "lifo-0", "prioritized"]


async def test_an_ordering_key_runs_its_jobs_one_at_a_time_in_order(backend: Backend) -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    running: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)

    async def apply(job: Any) -> None:
        key = job.ordering_key
        running[key] += 1
        peak[key] = max(peak[key], running[key])
        seen[key].append(job.data)
        await asyncio.sleep(0.01)
        running[key] -= 1
        if job.data == "debit" and job.attempts_made == 0:
            raise RuntimeError("ledger busy")  # retried at once; "close" waits for it

    retry = JobOptions(ordering_key="acct-1", attempts=3, backoff=Backoff("fixed", 0))
    other = JobOptions(ordering_key="acct-2")
    for step in ("open", "debit", "close"):
        await backend.queue.add(step, step, retry)
        await backend.queue.add(step, f"{step}-2", other)
    async with backend.worker(apply, concurrency=10) as worker:
        await wait_for(lambda: worker.completed_count == 6)
    assert seen["acct-1"] == ["open", "debit", "debit", "close"]
    assert seen["acct-2"] == ["open-2", "debit-2", "close-2"]
    assert peak == {"acct-1": 1, "acct-2": 1}
    job = (await backend.queue.get_jobs("completed"))[0]
    assert job.group_key == job.ordering_key in ("acct-1", "acct-2")


async def test_a_group_runs_at_most_its_concurrency_the_rest_wait(backend: Backend) -> None:
    release = asyncio.Event()
    running: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)

    async def hold(job: Any) -> None:
        running[job.group_key] += 1
        peak[job.group_key] = max(peak[job.group_key], running[job.group_key])
        await release.wait()
        running[job.group_key] -= 1

    q = backend.queue
    await q.add_bulk(
        [("sync", n, JobOptions(group_key="acme", group_concurrency=2)) for n in range(5)]
    )
    await q.add("plain", "free")
    async with backend.worker(hold, concurrency=10) as worker:
        await wait_for(lambda: running["acme"] == 2 and running[None] == 1)
        await asyncio.sleep(0.2)  # nothing more of the group starts meanwhile
        counts = await q.get_job_counts()
        assert (counts.active, counts.waiting) == (3, 3)
        parked = await q.get_jobs("group-waiting")
        assert len(parked) == counts.group_waiting <= 3
        assert all(j.state == "group-waiting" for j in parked)
        release.set()
        await wait_for(lambda: worker.completed_count == 6)
    assert peak["acme"] == 2
    assert (await q.get_job_counts()).group_waiting == 0


async def test_a_group_rate_limit_holds_jobs_as_rate_limited(backend: Backend) -> None:
    opts = JobOptions(group_key="api", group_concurrency=5, group_rate_limit=RateLimit(2, 3000))
    await backend.queue.add_bulk([("call", n, opts) for n in range(4)])
    async with backend.worker(_recorder([]), concurrency=4) as worker:
        await wait_for(lambda: worker.completed_count == 2)
        await asyncio.sleep(0.2)
        counts = await backend.queue.get_job_counts()
        assert worker.completed_count == 2
        assert counts.rate_limited == 2 and counts.delayed == 2
        assert {j.state for j in await backend.queue.get_jobs("rate-limited")} == {"rate-limited"}
        await backend.elapse(3000 + GUARD)  # a start stays in its window a little longer
        await wait_for(lambda: worker.completed_count == 4)


async def test_removing_a_waiting_job_of_an_ordering_key_lets_the_next_run(
    backend: Backend,
) -> None:
    seen: list[str] = []
    key = JobOptions(ordering_key="doc-9")
    first = await backend.queue.add("edit", "first", key)
    await backend.queue.add("edit", "second", key)
    assert first is not None
    await backend.queue.remove(first.id)
    async with backend.worker(_recorder(seen)):
        await wait_for(lambda: seen == ["second"])


async def test_a_token_bucket_starts_jobs_as_tokens_refill(backend: Backend) -> None:
    # 2 tokens, refilled at 1 token a second; each job costs 1: two start at once, the next
    # after a second, the last after two
    bucket = TokenBucket(capacity=2, refill_rate=1)
    opts = JobOptions(group_key="llm", group_concurrency=10, token_bucket=bucket)
    await backend.queue.add_bulk([("call", n, opts) for n in range(4)])
    async with backend.worker(_recorder([]), concurrency=4) as worker:
        await wait_for(lambda: worker.completed_count == 2)
        await asyncio.sleep(0.2)
        assert worker.completed_count == 2
        assert (await backend.queue.get_job_counts()).rate_limited == 2
        await backend.elapse(1000)
        await wait_for(lambda: worker.completed_count == 3)
        await backend.elapse(1000)
        await wait_for(lambda: worker.completed_count == 4)
    job = (await backend.queue.get_jobs("completed"))[0]
    assert job.group_key == "llm" and job.ordering_key is None


async def test_a_cost_grown_above_the_bucket_is_dead_lettered(backend: Backend) -> None:
    q = backend.queue
    big = await q.add(
        "call", "big", JobOptions(group_key="g", token_bucket=TokenBucket(3, 1), cost=2)
    )
    assert big is not None
    # the last add restates the group's bucket: capacity 1 now, below the first job's cost
    await q.add("call", "small", JobOptions(group_key="g", token_bucket=TokenBucket(1, 1)))
    seen: list[str] = []
    async with backend.worker(_recorder(seen)):
        await wait_for(lambda: seen == ["small"])
        dead = await wait_state(q, big.id, "failed")
    assert dead.failed_reason == "cost 2 exceeds the capacity 1 of the token bucket of group g"
    assert [j.id for j in await q.get_dead_letter_jobs()] == [big.id]


async def test_a_worker_limiter_is_one_budget_for_all_workers(backend: Backend) -> None:
    await backend.queue.add_bulk([("j", n) for n in range(6)])
    limiter = RateLimit(2, 3000)
    a = backend.worker(_recorder([]), concurrency=5, limiter=limiter)
    b = backend.worker(_recorder([]), concurrency=5, limiter=limiter)
    async with a, b:
        await wait_for(lambda: a.completed_count + b.completed_count == 2)
        await asyncio.sleep(0.2)
        assert a.completed_count + b.completed_count == 2
        await backend.elapse(3000 + GUARD)
        await wait_for(lambda: a.completed_count + b.completed_count == 4)
        await asyncio.sleep(0.2)
        assert a.completed_count + b.completed_count == 4


async def test_revoking_a_waiting_job_of_a_group_gives_its_place_back(backend: Backend) -> None:
    release = asyncio.Event()
    started: list[int] = []

    async def hold(job: Any) -> None:
        started.append(job.data)
        await release.wait()

    q = backend.queue
    opts = JobOptions(group_key="tenant", group_concurrency=1)
    jobs = [await q.add("j", n, opts) for n in range(3)]
    async with backend.worker(hold, concurrency=5) as worker:
        await wait_for(lambda: started == [0])
        assert await q.revoke(jobs[1].id) == "revoked"  # type: ignore[union-attr]
        release.set()
        await wait_for(lambda: worker.completed_count == 2)
    assert started == [0, 2]
    states = [await (await q.get_job(j.id)).get_state() for j in jobs]  # type: ignore[union-attr]
    assert states == ["completed", "failed", "completed"]
