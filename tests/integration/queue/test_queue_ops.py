"""Queue operations: adding, reading, pausing, draining, cleaning, obliterating, retrying,
removing, revoking, logs and the queue's own lifecycle; on standalone and cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    GlideMQError,
    Job,
    JobNotFoundError,
    JobStateError,
    Queue,
    ValidationError,
    Worker,
)
from glidemq.client.context import now_ms
from tests.helpers import wait_for

# =========================================================================== helpers


class Gate:
    """A processor that records the jobs it starts and hangs until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []

    async def __call__(self, job: Job[Any, Any]) -> str:
        self.started.append(job.id)
        await self.release.wait()
        return "released"


@asynccontextmanager
async def hanging_worker(
    name: str, conn: ConnectionOptions, concurrency: int = 1, **settings: Any
) -> AsyncIterator[tuple[Worker[Any, Any], Gate]]:
    gate = Gate()
    worker: Worker[Any, Any] = Worker(
        name, gate, connection=conn, concurrency=concurrency, **settings
    )
    await worker.start()
    try:
        yield worker, gate
    finally:
        gate.release.set()
        await worker.close(force=True)


async def run_worker_until(
    name: str,
    conn: ConnectionOptions,
    processor: Callable[[Job[Any, Any]], Any],
    done: Callable[[Worker[Any, Any]], bool],
    **settings: Any,
) -> Worker[Any, Any]:
    """Run a worker until `done(worker)`, then close it."""
    async with Worker(name, processor, connection=conn, **settings) as worker:
        await wait_for(lambda: done(worker))
    return worker


async def succeed(job: Job[Any, Any]) -> Any:
    return job.data


async def explode(job: Job[Any, Any]) -> None:
    raise RuntimeError(f"boom {job.id}")


@pytest.fixture
def server_keys(conn: ConnectionOptions, request: pytest.FixtureRequest) -> Callable[[str], list]:
    """List the keys of a queue as the server(s) hold them, with KEYS on every primary."""

    def keys(name: str) -> list[str]:
        pattern = f"glide:{{{name}}}:*"
        if conn.cluster:
            nodes = request.getfixturevalue("valkey_cluster").primaries()
        else:
            nodes = [request.getfixturevalue("valkey_server")]
        found: list[str] = []
        for node in nodes:
            found += [line for line in node.cli("KEYS", pattern).splitlines() if line]
        return sorted(found)

    return keys


def ids_of(jobs: list[Job[Any, Any]]) -> list[str]:
    return [j.id for j in jobs]


# =========================================================================== adding


async def test_add_returns_job_with_id_name_data_and_state(queue: Queue[Any, Any]) -> None:
    job = await queue.add("send", {"to": "ada"})
    assert job is not None
    assert job.id == "1"
    assert job.name == "send"
    assert job.data == {"to": "ada"}
    assert job.state == "waiting"
    assert job.queue_name == queue.name
    second = await queue.add("send", [1, 2])
    assert second is not None and second.id == "2"


async def test_add_delayed_and_prioritized_report_their_state(queue: Queue[Any, Any]) -> None:
    delayed = await queue.add("d", 1, {"delay": 60_000})
    prioritized = await queue.add("p", 2, {"priority": 4})
    assert delayed is not None and prioritized is not None
    assert delayed.state == "delayed" and delayed.delay == 60_000
    assert prioritized.state == "prioritized" and prioritized.priority == 4
    stored_d = await queue.get_job(delayed.id)
    stored_p = await queue.get_job(prioritized.id)
    assert stored_d is not None and stored_d.state == "delayed"
    assert stored_p is not None and stored_p.state == "prioritized"


async def test_add_with_custom_job_id_is_idempotent(queue: Queue[Any, Any]) -> None:
    first = await queue.add("order", {"v": 1}, {"job_id": "order-77"})
    assert first is not None and first.id == "order-77"
    again = await queue.add("other-name", {"v": 2}, {"job_id": "order-77"})
    assert again is None
    stored = await queue.get_job("order-77")
    assert stored is not None
    assert stored.name == "order" and stored.data == {"v": 1}
    counts = await queue.get_job_counts()
    assert counts.waiting == 1


async def test_add_bulk_over_the_chunk_size_keeps_order(queue: Queue[Any, Any]) -> None:
    n = 2_500  # more than two 1,000-job pipelines
    jobs = await queue.add_bulk([("bulk", {"i": i}) for i in range(n)])
    assert len(jobs) == n
    assert all(j is not None for j in jobs)
    returned = [j.id for j in jobs if j is not None]
    assert [j.data["i"] for j in jobs if j is not None] == list(range(n))
    assert len(set(returned)) == n
    stored = await queue.get_jobs("waiting")
    # the stream holds them in the order they were given, under the ids returned
    assert [j.id for j in stored] == returned
    assert [j.data["i"] for j in stored] == list(range(n))
    assert (await queue.get_job_counts()).waiting == n


async def test_add_bulk_accepts_mappings_tuples_and_reports_duplicates(
    queue: Queue[Any, Any],
) -> None:
    jobs = await queue.add_bulk(
        [
            {"name": "a", "data": 1},
            ("b", 2),
            ("c", 3, {"delay": 60_000}),
            {"name": "d", "data": 4, "opts": {"job_id": "fixed"}},
            ("e", 5, {"job_id": "fixed"}),
        ]
    )
    assert [None if j is None else j.name for j in jobs] == ["a", "b", "c", "d", None]
    assert jobs[2] is not None and jobs[2].state == "delayed"
    assert jobs[3] is not None and jobs[3].id == "fixed"
    stored = await queue.get_job("fixed")
    assert stored is not None and stored.name == "d" and stored.data == 4


async def test_add_bulk_keeps_each_jobs_own_options_across_runs_of_like_jobs(
    queue: Queue[Any, Any],
) -> None:
    # like neighbours share one header on the wire: every switch of name, options or
    # custom id must still reach the right job
    items: list[Any] = []
    for i in range(40):
        opts: dict[str, Any] = {}
        if i % 10 >= 5:
            opts["priority"] = 3
        if i % 7 == 0:
            opts["job_id"] = f"own-{i}"
        if i in (20, 21):
            opts["attempts"] = 4
        if i in (30, 31, 32):
            opts["ordering_key"] = "k"
        items.append((f"n{i // 3}", {"i": i}, opts))
    jobs = await queue.add_bulk(items)
    assert all(j is not None for j in jobs)
    for i, job in enumerate(jobs):
        assert job is not None
        stored = await queue.get_job(job.id)
        assert stored is not None
        assert (stored.name, stored.data) == (f"n{i // 3}", {"i": i})
        assert stored.priority == (3 if i % 10 >= 5 else 0)
        assert stored.max_attempts == (4 if i in (20, 21) else 1)
        assert (stored.opts.get("orderingKey") == "k") == (i in (30, 31, 32))
        if i % 7 == 0:
            assert stored.id == f"own-{i}"


async def test_malformed_add_bulk_call_is_an_error_and_writes_nothing(
    queue: Queue[Any, Any],
) -> None:
    ctx = await queue._context()
    k = queue.keys
    keys = [k.id, k.stream, k.scheduled, k.events]
    good = ["1", "a", "{}", "0", "0", "1", "0", "", "", "data"]
    for args in (
        [str(now_ms()), *good, "2", "b", "{}", "0", "0", "1", "0", "", "", "only-one"],
        [str(now_ms()), *good, "x", "b", "{}", "0", "0", "1", "0", "", "", "d"],
        [str(now_ms()), *good, "0", "b", "{}", "0", "0", "1", "0", "", ""],
    ):
        with pytest.raises(GlideMQError, match="malformed run"):
            await ctx.fcall("glidemq_addBulk", keys, args)
    assert (await queue.get_job_counts()).waiting == 0
    assert await ctx.client.get(k.id) is None


@pytest.mark.parametrize(
    ("bad_item", "field"),
    [
        (("x", 1, {"delay": -5}), "jobs[3].delay"),
        (("x", {1, 2}), "jobs[3].data"),
        (("x", 1, {"job_id": "a:b"}), "jobs[3].job_id"),
        (("x", 1, {"atempts": 2}), "jobs[3].atempts"),
        ({"name": "x", "payload": 1}, "jobs[3]"),
        (["x", 1], "jobs[3]"),
        ((7, 1), "jobs[3].name"),
    ],
)
async def test_add_bulk_validates_every_item_before_sending(
    queue: Queue[Any, Any], bad_item: Any, field: str
) -> None:
    items: list[Any] = [("ok", i) for i in range(6)]
    items[3] = bad_item
    with pytest.raises(ValidationError) as info:
        await queue.add_bulk(items)
    assert info.value.field == field
    assert isinstance(info.value, GlideMQError)
    counts = await queue.get_job_counts()
    assert counts.as_dict() == dict.fromkeys(counts.as_dict(), 0)
    client = (await queue._context()).client
    assert await client.get(queue.keys.id) is None  # no id was ever taken


# =========================================================================== reading


async def test_get_job_of_unknown_id_is_none(queue: Queue[Any, Any]) -> None:
    assert await queue.get_job("nope") is None
    assert await queue.get_job("12345") is None


async def test_get_jobs_waiting_in_run_order_with_paging(queue: Queue[Any, Any]) -> None:
    jobs = await queue.add_bulk([("w", i) for i in range(5)])
    ids = [j.id for j in jobs if j is not None]
    assert ids_of(await queue.get_jobs("waiting")) == ids
    assert ids_of(await queue.get_jobs("waiting", 0, 0)) == ids[:1]
    assert ids_of(await queue.get_jobs("waiting", 1, 3)) == ids[1:4]
    assert ids_of(await queue.get_jobs("waiting", 4, 10)) == ids[4:]
    assert await queue.get_jobs("waiting", 5, 9) == []


async def test_get_jobs_delayed_and_prioritized_in_run_order(queue: Queue[Any, Any]) -> None:
    late = await queue.add("late", 1, {"delay": 90_000})
    soon = await queue.add("soon", 2, {"delay": 30_000})
    low = await queue.add("low", 3, {"priority": 9})
    high = await queue.add("high", 4, {"priority": 1})
    assert late and soon and low and high
    assert ids_of(await queue.get_jobs("delayed")) == [soon.id, late.id]
    assert ids_of(await queue.get_jobs("prioritized")) == [high.id, low.id]
    assert ids_of(await queue.get_jobs("delayed", 1, 1)) == [late.id]
    assert ids_of(await queue.get_jobs("prioritized", 0, 0)) == [high.id]
    both = await queue.get_jobs(["delayed", "prioritized"])
    assert {j.id for j in both} == {late.id, soon.id, low.id, high.id}
    assert await queue.get_jobs("waiting") == []


async def test_get_jobs_active_lists_running_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    jobs = await queue.add_bulk([("a", i) for i in range(3)])
    async with hanging_worker(queue.name, conn, concurrency=2) as (_, gate):
        await wait_for(lambda: len(gate.started) == 2)
        active = await queue.get_jobs("active")
        assert sorted(j.id for j in active) == sorted(gate.started)
        assert all(j.state == "active" for j in active)
        waiting = await queue.get_jobs("waiting")
        assert [j.id for j in waiting] == [j.id for j in jobs if j and j.id not in gate.started]
        assert len(await queue.get_jobs("active", 0, 0)) == 1
        counts = await queue.get_job_counts()
        assert (counts.active, counts.waiting) == (2, 1)


async def test_get_jobs_completed_newest_first_with_paging(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    # Ids whose text order is the reverse of their finishing order, so "newest first"
    # cannot pass by accident of how equal scores sort.
    for job_id in ("c", "b", "a"):
        await queue.add("x", job_id, {"job_id": job_id})

    async def slow_succeed(job: Job[Any, Any]) -> str:
        await asyncio.sleep(0.005)  # distinct finish timestamps
        return job.id

    await run_worker_until(
        queue.name, conn, slow_succeed, lambda w: w.completed_count == 3, concurrency=1
    )
    assert ids_of(await queue.get_jobs("completed")) == ["a", "b", "c"]
    assert ids_of(await queue.get_jobs("completed", 0, 0)) == ["a"]
    assert ids_of(await queue.get_jobs("completed", 1, 2)) == ["b", "c"]
    done = await queue.get_jobs("completed")
    assert [j.returnvalue for j in done] == ["a", "b", "c"]


async def test_get_jobs_failed_and_dead_letter(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    failed = await queue.add_bulk([("f", i) for i in range(2)])
    await run_worker_until(queue.name, conn, explode, lambda w: w.failed_count == 2)
    listed = await queue.get_jobs("failed")
    assert sorted(j.id for j in listed) == sorted(j.id for j in failed if j)
    assert all(j.failed_reason and j.failed_reason.startswith("boom") for j in listed)
    assert len(await queue.get_jobs("failed", 0, 0)) == 1

    parked = await queue.add("dl", 0)
    assert parked is not None
    await run_worker_until(
        queue.name, conn, explode, lambda w: w.failed_count == 1, dead_letter=True
    )
    dead = await queue.get_jobs("dead_letter")
    assert [j.id for j in dead] == [parked.id]
    assert [j.id for j in await queue.get_dead_letter_jobs()] == [parked.id]
    assert dead[0].failed_reason == f"boom {parked.id}"
    counts = await queue.get_job_counts()
    assert (counts.failed, counts.dead_letter) == (2, 1)


async def test_get_job_counts_and_count(queue: Queue[Any, Any]) -> None:
    await queue.add_bulk([("w", i) for i in range(2)])
    await queue.add("d", 0, {"delay": 60_000})
    await queue.add("p", 0, {"priority": 2})
    await queue.add("p", 0, {"priority": 3})
    counts = await queue.get_job_counts()
    assert counts.as_dict() == {
        "waiting": 2,
        "active": 0,
        "delayed": 1,
        "prioritized": 2,
        "completed": 0,
        "failed": 0,
        "dead_letter": 0,
        "waiting_children": 0,
    }
    assert counts.paused is False
    assert await queue.count() == 5


# =========================================================================== control


async def test_pause_and_resume(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    assert await queue.is_paused() is False
    await queue.pause()
    assert await queue.is_paused() is True
    assert (await queue.get_job_counts()).paused is True
    job = await queue.add("held", 1)
    assert job is not None
    async with Worker(queue.name, succeed, connection=conn, block_timeout=200) as worker:
        await asyncio.sleep(0.6)  # several fetch attempts while paused
        assert worker.completed_count == 0
        assert await job.get_state() == "waiting"
        await queue.resume()
        assert await queue.is_paused() is False
        await wait_for(lambda: worker.completed_count == 1)
    assert await job.get_state() == "completed"


async def test_pause_is_idempotent(queue: Queue[Any, Any]) -> None:
    await queue.pause()
    await queue.pause()
    assert await queue.is_paused()
    await queue.resume()
    await queue.resume()
    assert not await queue.is_paused()


async def test_drain_removes_waiting_and_prioritized_only(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    running = await queue.add("running", 0)
    assert running is not None
    async with hanging_worker(queue.name, conn, concurrency=1) as (worker, gate):
        await wait_for(lambda: gate.started == [running.id])
        waiting = await queue.add_bulk([("w", i) for i in range(3)])
        prio = await queue.add("p", 0, {"priority": 5})
        delayed = await queue.add("d", 0, {"delay": 60_000})
        assert prio is not None and delayed is not None

        assert await queue.drain() == 4
        for j in [*waiting, prio]:
            assert j is not None and await queue.get_job(j.id) is None
        assert await delayed.get_state() == "delayed"
        assert await running.get_state() == "active"
        counts = await queue.get_job_counts()
        assert (counts.waiting, counts.prioritized, counts.delayed, counts.active) == (0, 0, 1, 1)

        assert await queue.drain(delayed=True) == 1
        assert await queue.get_job(delayed.id) is None
        assert await running.get_state() == "active"

        gate.release.set()  # the running job was left alone and finishes normally
        await wait_for(lambda: worker.completed_count == 1)
    assert await running.get_state() == "completed"


async def test_drain_of_an_empty_queue_returns_zero(queue: Queue[Any, Any]) -> None:
    assert await queue.drain() == 0
    assert await queue.drain(delayed=True) == 0


# =========================================================================== clean


async def test_clean_completed_respects_grace_and_limit(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    old = await queue.add_bulk([("old", i) for i in range(2)])
    await run_worker_until(queue.name, conn, succeed, lambda w: w.completed_count == 2)
    await asyncio.sleep(0.25)  # a clear gap between the old and the new finish times
    new = await queue.add("new", 9)
    assert new is not None
    await run_worker_until(queue.name, conn, succeed, lambda w: w.completed_count == 1)
    old_ids = {j.id for j in old if j}
    finished = {j.id: j.finished_on for j in await queue.get_jobs("completed")}
    newest_old = max(finished[i] or 0 for i in old_ids)
    middle = (newest_old + (finished[new.id] or 0)) // 2

    # everything finished well within a minute: nothing is old enough
    assert await queue.clean(60_000) == []
    first = await queue.clean(now_ms() - middle, limit=1)
    assert len(first) == 1 and first[0] in old_ids
    second = await queue.clean(now_ms() - middle, limit=10)
    assert set(first + second) == old_ids
    for job_id in old_ids:
        assert await queue.get_job(job_id) is None
    assert [j.id for j in await queue.get_jobs("completed")] == [new.id]
    assert await queue.clean(0) == [new.id]
    assert (await queue.get_job_counts()).completed == 0


async def test_clean_failed(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    jobs = await queue.add_bulk([("f", i) for i in range(3)])
    await run_worker_until(queue.name, conn, explode, lambda w: w.failed_count == 3)
    assert await queue.clean(60_000, state="failed") == []
    assert len(await queue.clean(0, limit=2, state="failed")) == 2
    rest = await queue.clean(0, state="failed")
    assert len(rest) == 1
    assert (await queue.get_job_counts()).failed == 0
    for j in jobs:
        assert j is not None and await queue.get_job(j.id) is None


async def test_clean_waiting_respects_grace_and_limit(queue: Queue[Any, Any]) -> None:
    old = await queue.add_bulk([("old", i) for i in range(2)])
    await asyncio.sleep(0.25)
    new = await queue.add("new", 1)
    assert new is not None and all(old)
    middle = (max(j.timestamp for j in old if j) + new.timestamp) // 2
    assert await queue.clean(60_000, state="waiting") == []
    first = await queue.clean(now_ms() - middle, limit=1, state="waiting")
    assert first == [old[0].id]  # type: ignore[union-attr]
    second = await queue.clean(now_ms() - middle, state="waiting")
    assert second == [old[1].id]  # type: ignore[union-attr]
    assert [j.id for j in await queue.get_jobs("waiting")] == [new.id]
    assert (await queue.get_job_counts()).waiting == 1


async def test_clean_delayed_and_prioritized(queue: Queue[Any, Any]) -> None:
    d1 = await queue.add("d", 1, {"delay": 60_000})
    d2 = await queue.add("d", 2, {"delay": 60_000})
    p = await queue.add("p", 3, {"priority": 3})
    assert d1 and d2 and p
    await wait_for(lambda: now_ms() > max(d1.timestamp, d2.timestamp, p.timestamp))
    assert await queue.clean(60_000, state="delayed") == []
    removed = await queue.clean(0, limit=1, state="delayed")
    assert len(removed) == 1
    removed += await queue.clean(0, state="delayed")
    assert sorted(removed) == sorted([d1.id, d2.id])
    assert await p.get_state() == "prioritized"  # another state, untouched
    assert await queue.clean(0, state="prioritized") == [p.id]
    counts = await queue.get_job_counts()
    assert (counts.delayed, counts.prioritized) == (0, 0)


# =========================================================================== obliterate


async def test_obliterate_removes_every_key_of_the_queue(
    queue: Queue[Any, Any], conn: ConnectionOptions, server_keys: Callable[[str], list[str]]
) -> None:
    logged = await queue.add("logged", 1)
    assert logged is not None
    await logged.log("a line")
    await queue.add_bulk([("ok", i) for i in range(3)])
    await queue.add("bad", 0)
    await queue.add("custom", 0, {"job_id": "my-id"})
    await queue.add("dedup", 0, {"deduplication": {"id": "d-1"}})

    async def mixed(job: Job[Any, Any]) -> int:
        if job.name == "bad":
            raise ValueError("bad job")
        return 1

    await run_worker_until(
        queue.name, conn, mixed, lambda w: w.completed_count + w.failed_count == 7
    )
    await queue.add("delayed", 0, {"delay": 60_000})
    await queue.add("prio", 0, {"priority": 2})
    await queue.pause()
    before = server_keys(queue.name)
    assert len(before) > 10, before  # jobs, logs, stream, sets, meta, events, dedup...

    await queue.obliterate()

    assert server_keys(queue.name) == []
    counts = await queue.get_job_counts()
    assert counts.as_dict() == dict.fromkeys(counts.as_dict(), 0)
    assert counts.paused is False


async def test_obliterate_of_a_queue_with_many_jobs(
    queue: Queue[Any, Any], server_keys: Callable[[str], list[str]]
) -> None:
    await queue.add_bulk([("many", i) for i in range(2_500)])  # several SCAN batches
    await queue.obliterate()
    assert server_keys(queue.name) == []


async def test_obliterate_refuses_running_jobs_unless_forced(
    queue: Queue[Any, Any], conn: ConnectionOptions, server_keys: Callable[[str], list[str]]
) -> None:
    job = await queue.add("busy", 1)
    assert job is not None
    async with hanging_worker(queue.name, conn) as (worker, gate):
        await wait_for(lambda: gate.started == [job.id])
        with pytest.raises(GlideMQError, match="running jobs"):
            await queue.obliterate()
        assert await job.get_state() == "active"
        assert server_keys(queue.name) != []
        await queue.obliterate(force=True)
        assert server_keys(queue.name) == []
        await worker.close(force=True)


# =========================================================================== retry, remove, revoke


async def test_retry_jobs_moves_failed_to_waiting_and_they_run_again(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    jobs = [j for j in await queue.add_bulk([("r", i) for i in range(3)]) if j]
    await run_worker_until(queue.name, conn, explode, lambda w: w.failed_count == 3)
    for j in jobs:
        stored = await queue.get_job(j.id)
        assert stored is not None and stored.state == "failed" and stored.attempts_made == 1

    assert await queue.retry_jobs(count=2) == 2
    assert await queue.retry_jobs() == 1
    assert await queue.retry_jobs() == 0
    for j in jobs:
        stored = await queue.get_job(j.id)
        assert stored is not None
        assert stored.state == "waiting"
        assert stored.attempts_made == 0
        assert stored.failed_reason is None and stored.finished_on is None
    counts = await queue.get_job_counts()
    assert (counts.failed, counts.waiting) == (0, 3)

    await run_worker_until(queue.name, conn, succeed, lambda w: w.completed_count == 3)
    for j in jobs:
        stored = await queue.get_job(j.id)
        assert stored is not None and stored.state == "completed"
        assert stored.returnvalue == j.data


async def test_retry_jobs_of_completed(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    job = await queue.add("again", 5)
    assert job is not None
    await run_worker_until(queue.name, conn, succeed, lambda w: w.completed_count == 1)
    assert await queue.retry_jobs(state="completed") == 1
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.state == "waiting" and stored.returnvalue is None


async def test_remove_waiting_delayed_and_completed_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done = await queue.add("done", 1)
    assert done is not None
    await done.log("kept until removed")
    await run_worker_until(queue.name, conn, succeed, lambda w: w.completed_count == 1)
    waiting = await queue.add("waiting", 2)
    delayed = await queue.add("delayed", 3, {"delay": 60_000})
    prio = await queue.add("prio", 4, {"priority": 7})
    assert waiting and delayed and prio
    before = await queue.get_job_counts()
    assert (before.waiting, before.delayed, before.prioritized, before.completed) == (1, 1, 1, 1)

    for j in (waiting, delayed, prio, done):
        await queue.remove(j.id)
        assert await queue.get_job(j.id) is None

    after = await queue.get_job_counts()
    assert after.as_dict() == dict.fromkeys(after.as_dict(), 0)
    assert await queue.get_job_logs(done.id) == ([], 0)


async def test_remove_of_active_job_raises_job_state_error(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("busy", 1)
    assert job is not None
    async with hanging_worker(queue.name, conn) as (worker, gate):
        await wait_for(lambda: gate.started == [job.id])
        with pytest.raises(JobStateError) as info:
            await queue.remove(job.id)
        assert info.value.job_id == job.id
        assert await job.get_state() == "active"
        gate.release.set()
        await wait_for(lambda: worker.completed_count == 1)
    assert await job.get_state() == "completed"


async def test_remove_of_unknown_job_raises_not_found(queue: Queue[Any, Any]) -> None:
    with pytest.raises(JobNotFoundError) as info:
        await queue.remove("missing")
    assert info.value.job_id == "missing" and info.value.queue == queue.name


async def test_revoke_of_a_waiting_job_fails_it(queue: Queue[Any, Any]) -> None:
    job = await queue.add("cancel-me", 1)
    assert job is not None
    assert await queue.revoke(job.id) == "revoked"
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.state == "failed" and stored.failed_reason == "revoked" and stored.revoked
    assert await job.is_revoked()
    counts = await queue.get_job_counts()
    assert (counts.waiting, counts.failed) == (0, 1)


async def test_revoke_of_a_running_job_aborts_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("long", 1)
    assert job is not None
    async with hanging_worker(queue.name, conn, lock_duration=600) as (worker, gate):
        await wait_for(lambda: gate.started == [job.id])
        assert await queue.revoke(job.id) == "flagged"
        await wait_for(lambda: worker.failed_count == 1)
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.state == "failed" and stored.failed_reason == "revoked"
    assert worker.completed_count == 0


async def test_revoke_of_finished_or_unknown_job_raises(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("quick", 1)
    assert job is not None
    await run_worker_until(queue.name, conn, succeed, lambda w: w.completed_count == 1)
    with pytest.raises(JobStateError):
        await queue.revoke(job.id)
    with pytest.raises(JobNotFoundError):
        await queue.revoke("missing")
    assert await job.get_state() == "completed"


# =========================================================================== logs


async def test_get_job_logs_returns_lines_and_count(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("chatty", 1)
    assert job is not None

    async def chatty(j: Job[Any, Any]) -> None:
        for line in ("starting", "halfway ✓", "done"):
            await j.log(line)

    await run_worker_until(queue.name, conn, chatty, lambda w: w.completed_count == 1)
    assert await queue.get_job_logs(job.id) == (["starting", "halfway ✓", "done"], 3)
    assert await queue.get_job_logs(job.id, 1, 1) == (["halfway ✓"], 3)
    assert await queue.get_job_logs(job.id, 0, -2) == (["starting", "halfway ✓"], 3)
    assert await queue.get_job_logs("unknown") == ([], 0)


# =========================================================================== lifecycle


async def test_close_is_idempotent_and_later_operations_raise(
    conn: ConnectionOptions, queue_name: str
) -> None:
    q: Queue[Any, Any] = Queue(queue_name, connection=conn)
    job = await q.add("x", 1)
    assert job is not None
    await q.close()
    await q.close()
    for op in (
        lambda: q.add("y", 2),
        lambda: q.get_job(job.id),
        lambda: q.get_job_counts(),
        lambda: q.pause(),
    ):
        with pytest.raises(GlideMQError, match="closed"):
            await op()
    async with Queue(queue_name, connection=conn) as cleanup:
        await cleanup.obliterate(force=True)


async def test_close_of_a_never_connected_queue(conn: ConnectionOptions, queue_name: str) -> None:
    q: Queue[Any, Any] = Queue(queue_name, connection=conn)
    await q.close()
    with pytest.raises(GlideMQError):
        await q.get_job_counts()


async def test_async_with_connects_and_closes(conn: ConnectionOptions, queue_name: str) -> None:
    async with Queue(queue_name, connection=conn) as q:
        job = await q.add("ctx", {"ok": True})
        assert job is not None
        stored = await q.get_job(job.id)
        assert stored is not None and stored.data == {"ok": True}
        await q.obliterate()
    with pytest.raises(GlideMQError, match="closed"):
        await q.add("after", 1)
