"""Request/response: add_and_wait returns results, raises failures and time-outs, scales to
many callers on one connection, never misses a job that finishes at once; result cache TTL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from glide import AllNodes, GlideClusterClient

from glidemq import (
    ConnectionOptions,
    GlideMQError,
    Job,
    JobFailedError,
    JobNotFoundError,
    JobOptions,
    JobTimeoutError,
    Queue,
    ValidationError,
    Worker,
)
from glidemq.queue.request import result_key
from tests.helpers import FAST, job_state, wait_for


async def double(job: Job[dict[str, int], int]) -> int:
    return job.data["n"] * 2


async def _client_names(queue: Queue[Any, Any]) -> list[str]:
    """Names of every client connected to the server(s) of this queue."""
    ctx = await queue._context()
    client = ctx.client
    if isinstance(client, GlideClusterClient):
        reply: Any = await client.custom_command(["CLIENT", "LIST"], AllNodes())
        text = "".join(v.decode() for v in reply.values())
    else:
        text = (await client.custom_command(["CLIENT", "LIST"])).decode()  # type: ignore[union-attr]
    return [p[5:] for line in text.splitlines() for p in line.split() if p.startswith("name=")]


async def test_returns_the_result(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    async with Worker(queue.name, double, connection=conn, **FAST):
        assert await queue.add_and_wait("double", {"n": 21}, timeout=10) == 42
        assert await queue.add_and_wait("double", {"n": 5}, {"attempts": 2}, timeout=10) == 10


async def test_raises_the_failure_with_reason_and_stacktrace(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def boom(job: Job[Any, Any]) -> None:
        raise ValueError(f"bad input {job.data}")

    async with Worker(queue.name, boom, connection=conn, **FAST):
        with pytest.raises(JobFailedError) as info:
            await queue.add_and_wait("boom", 7, {"attempts": 2}, timeout=10)
    err = info.value
    assert err.reason == "bad input 7"
    assert err.queue == queue.name
    assert err.stacktrace is not None and "ValueError: bad input 7" in err.stacktrace
    job = await queue.get_job(err.job_id)
    assert job is not None and job.state == "failed" and job.attempts_made == 2


async def test_times_out_typed_and_leaves_the_job_intact(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    with pytest.raises(JobTimeoutError) as info:
        await queue.add_and_wait("double", {"n": 4}, {"job_id": "late-1"}, timeout=0.3)
    assert isinstance(info.value, TimeoutError)
    assert await job_state(queue, "late-1") == "waiting"
    async with Worker(queue.name, double, connection=conn, **FAST):
        # the same id now waits for the job that is still there, which runs once
        assert await queue.add_and_wait("double", {"n": 99}, {"job_id": "late-1"}) == 8
    assert queue._results is not None and not queue._results._waiters


async def test_bad_timeout_is_refused_before_adding(queue: Queue[Any, Any]) -> None:
    with pytest.raises(ValidationError):
        await queue.add_and_wait("x", 1, timeout=0)
    assert await queue.count() == 0


async def test_many_concurrent_callers_share_one_reader(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def slow_double(job: Job[dict[str, int], int]) -> int:
        await asyncio.sleep(0.01)
        return job.data["n"] * 2

    async with Worker(queue.name, slow_double, connection=conn, concurrency=50, **FAST):
        results = await asyncio.gather(
            *(queue.add_and_wait("double", {"n": i}, timeout=30) for i in range(200))
        )
        names = await _client_names(queue)
    assert results == [i * 2 for i in range(200)]
    # one reader client for all 200 callers (a cluster client has a connection per node,
    # like the Queue's own client)
    assert names.count(f"glidemq-results-{queue.name}") == names.count(
        f"glidemq-queue-{queue.name}"
    )
    assert names.count(f"glidemq-queue-{queue.name}") >= 1
    assert queue._results is not None and not queue._results._waiters


class _LateQueue(Queue[Any, Any]):
    """A Queue whose add returns only after the job finished and was deleted: the caller
    learns the id too late to have been listening for it by id."""

    async def add(self, name: str, data: Any = None, opts: Any = None) -> Any:
        job = await super().add(name, data, opts)
        assert job is not None
        await wait_for(lambda: _gone(self, job.id), timeout=10)  # done and deleted already
        return job


async def _gone(queue: Queue[Any, Any], job_id: str) -> bool:
    return await queue.get_job(job_id) is None


async def test_a_job_finishing_before_add_returns_is_not_missed(
    conn: ConnectionOptions, queue_name: str
) -> None:
    # remove_on_complete deletes the job at once and nothing caches its result: only the
    # events read while the add was in flight can deliver it.
    async with (
        _LateQueue(queue_name, connection=conn) as late,
        Worker(queue_name, double, connection=conn, remove_on_complete=True, **FAST),
    ):
        for n in range(3):
            assert await late.add_and_wait("double", {"n": n}, timeout=10) == n * 2
        await late.obliterate(force=True)


async def test_workers_without_events_still_resolve(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with Worker(queue.name, double, connection=conn, events=False, **FAST):
        assert await queue.add_and_wait("double", {"n": 3}, timeout=10) == 6


async def test_duplicate_custom_id_returns_the_finished_jobs_result(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs: list[int] = []

    async def count(job: Job[dict[str, int], int]) -> int:
        runs.append(job.data["n"])
        return job.data["n"] * 2

    async with Worker(queue.name, count, connection=conn, **FAST):
        assert await queue.add_and_wait("d", {"n": 1}, {"job_id": "dup"}) == 2
    # no worker now: the answer comes from the finished job, nothing runs again
    assert await queue.add_and_wait("d", {"n": 50}, {"job_id": "dup"}, timeout=5) == 2
    assert runs == [1]


async def test_duplicate_custom_id_waits_for_the_running_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    release = asyncio.Event()
    runs = 0

    async def gated(job: Job[int, str]) -> str:
        nonlocal runs
        runs += 1
        await release.wait()
        return f"done {job.data}"

    async with Worker(queue.name, gated, connection=conn, **FAST):
        first = asyncio.ensure_future(queue.add_and_wait("g", 1, {"job_id": "run-1"}))
        await wait_for(lambda: runs == 1)
        second = asyncio.ensure_future(queue.add_and_wait("g", 2, {"job_id": "run-1"}))
        await asyncio.sleep(0.1)
        assert not first.done() and not second.done()
        release.set()
        assert await first == "done 1"
        assert await second == "done 1"
    assert runs == 1


async def test_duplicate_of_a_failed_job_raises_its_failure(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def boom(job: Job[Any, Any]) -> None:
        raise RuntimeError("nope")

    async with Worker(queue.name, boom, connection=conn, **FAST):
        with pytest.raises(JobFailedError):
            await queue.add_and_wait("b", None, {"job_id": "f-1"})
    with pytest.raises(JobFailedError) as info:
        await queue.add_and_wait("b", None, {"job_id": "f-1"}, timeout=5)
    assert info.value.reason == "nope" and "RuntimeError" in (info.value.stacktrace or "")


async def test_revoked_and_removed_jobs_end_the_wait(queue: Queue[Any, Any]) -> None:
    waiting = asyncio.ensure_future(queue.add_and_wait("r", 1, {"job_id": "rv-1"}, timeout=10))
    await wait_for(lambda: job_state(queue, "rv-1"))
    assert await queue.revoke("rv-1") == "revoked"
    with pytest.raises(JobFailedError) as info:
        await waiting
    assert info.value.reason == "revoked"

    waiting = asyncio.ensure_future(queue.add_and_wait("r", 1, {"job_id": "rm-1"}, timeout=10))
    await wait_for(lambda: job_state(queue, "rm-1"))
    await queue.remove("rm-1")
    with pytest.raises(JobNotFoundError):
        await waiting


async def test_close_ends_pending_waits(conn: ConnectionOptions, queue_name: str) -> None:
    q: Queue[Any, Any] = Queue(queue_name, connection=conn)
    waiting = asyncio.ensure_future(q.add_and_wait("x", 1, timeout=10))
    await wait_for(lambda: q._results is not None and q._results._waiters)
    try:
        await q.close()
        with pytest.raises(GlideMQError):
            await waiting
    finally:
        async with Queue(queue_name, connection=conn) as cleanup:
            await cleanup.obliterate(force=True)


# -- result cache -----------------------------------------------------------------------


async def _pttl(queue: Queue[Any, Any], job_id: str) -> int:
    ctx = await queue._context()
    return int(await ctx.client.pttl(result_key(queue, job_id)))


async def test_result_is_cached_for_its_ttl_then_expires(
    conn: ConnectionOptions, queue_name: str
) -> None:
    async with (
        Queue(queue_name, connection=conn, result_ttl=60_000) as q,
        Worker(queue_name, double, connection=conn, remove_on_complete=True, **FAST),
    ):
        try:
            assert await q.add_and_wait("d", {"n": 2}, {"job_id": "c-1"}) == 4
            assert await q.add_and_wait("d", {"n": 3}, {"job_id": "c-2", "result_ttl": 300}) == 6
            assert await q.add_and_wait("d", {"n": 4}, {"job_id": "c-3", "result_ttl": 0}) == 8
            assert 0 < await _pttl(q, "c-1") <= 60_000
            assert await _pttl(q, "c-3") == -2  # result_ttl=0: nothing cached
            # the job record is gone (remove_on_complete), the cached result answers
            assert await q.get_job("c-1") is None
            assert await q.add_and_wait("d", {"n": 100}, {"job_id": "c-1"}, timeout=5) == 4
            # the short per-job ttl expires; the id is free again and runs anew
            await wait_for(lambda: _pttl_is(q, "c-2", -2), timeout=10)
            assert await q.add_and_wait("d", {"n": 10}, {"job_id": "c-2"}, timeout=10) == 20
        finally:
            await q.obliterate(force=True)


async def _pttl_is(queue: Queue[Any, Any], job_id: str, value: int) -> bool:
    return await _pttl(queue, job_id) == value


async def test_failures_are_cached_and_retry_and_remove_drop_the_cache(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def boom(job: Job[Any, Any]) -> None:
        raise KeyError("missing")

    opts = JobOptions(job_id="f-2", result_ttl=60_000, remove_on_fail=False)
    async with Worker(queue.name, boom, connection=conn, **FAST):
        with pytest.raises(JobFailedError):
            await queue.add_and_wait("b", None, opts)
    ctx = await queue._context()
    cached = await ctx.client.hgetall(result_key(queue, "f-2"))
    assert cached[b"state"] == b"failed" and b"KeyError" in cached[b"stacktrace"]
    job = await queue.get_job("f-2")
    assert job is not None
    await job.retry()
    assert await _pttl(queue, "f-2") == -2  # a retried job's old outcome is not served
    await queue.remove("f-2")
    assert await queue.get_job("f-2") is None


async def test_plain_adds_write_no_result_field(queue: Queue[Any, Any]) -> None:
    job = await queue.add("plain", 1)
    assert job is not None
    ctx = await queue._context()
    assert await ctx.client.hget(queue.keys.job(job.id), "rttl") is None
    with pytest.raises(ValidationError):
        JobOptions(result_ttl=-1)
    with pytest.raises(ValidationError):
        Queue("q", result_ttl=-5)


async def test_result_ttl_option_plumbing() -> None:
    opts = JobOptions.coerce({"result_ttl": 5000})
    assert opts.result_ttl == 5000 and opts.to_wire()["resultTtl"] == 5000
    assert "resultTtl" not in JobOptions(result_ttl=0).to_wire()


async def test_a_raw_wire_producer_gets_the_result_cache(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    # any producer that writes resultTtl into jobOpts (here with spaces, as json.dumps does)
    ctx = await queue._context()
    k = queue.keys
    args = ["double", '{"n": 6}', '{"resultTtl": 60000}', str(int(1000 * 1e9))]
    args += ["0", "0", "", "1", "", "0", "0", "0", "0", "0", "0", "0", "raw-1"]
    assert await ctx.fcall("glidemq_addJob", [k.id, k.stream, k.scheduled, k.events], args) in (
        b"raw-1",
        "raw-1",
    )
    assert await ctx.client.hget(k.job("raw-1"), "rttl") == b"60000"
    async with Worker(queue.name, double, connection=conn, **FAST):
        assert await queue.add_and_wait("double", None, {"job_id": "raw-1"}, timeout=10) == 12
    assert 0 < await _pttl(queue, "raw-1") <= 60_000


async def test_the_reader_stops_when_idle_and_starts_again(
    queue: Queue[Any, Any], conn: ConnectionOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glidemq.queue import request

    monkeypatch.setattr(request, "_IDLE_STOP", 0.2)
    monkeypatch.setattr(request, "_BLOCK_MS", 100)
    async with Worker(queue.name, double, connection=conn, **FAST):
        assert await queue.add_and_wait("double", {"n": 1}, timeout=10) == 2
        waiter = queue._results
        assert waiter is not None
        await wait_for(lambda: waiter._reader is None)
        # a fresh position is pinned before the next add: nothing is missed
        assert await queue.add_and_wait("double", {"n": 2}, timeout=10) == 4
