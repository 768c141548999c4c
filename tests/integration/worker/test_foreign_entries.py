"""A stream shared with another producer: entries without glidemq's `id` field are never
deleted unread. They move to the queue's `quarantine` stream (fields kept, with the entry id
and a reason), are counted in `meta.quarantined`, produce a `quarantined` event and a worker
log line, and a job hash they name by `jobId` (Node glide-mq's field) fails with the reason.
Our own jobs on the same stream run as usual."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from glide import MaxId, MinId

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.client.connection import Client
from tests.helpers import FAST, wait_for

FOREIGN_NAMED = 12  # entries with jobId + name, their job hashes 'waiting'
FOREIGN_BARE = 5  # entries with unrelated fields only


async def _raw(queue: Queue[Any, Any]) -> Client:
    ctx = await queue._context()
    return ctx.client


def _pairs(flat: list[Any]) -> dict[bytes, bytes]:
    it = iter(flat)
    return dict(zip(it, it, strict=True))


async def _write_foreign(queue: Queue[Any, Any], tag: str) -> list[str]:
    """Entries as another producer writes them; the ids of the job hashes they name."""
    client = await _raw(queue)
    stream = queue.keys.stream
    named = []
    for i in range(FOREIGN_NAMED):
        job_id = f"node-{tag}-{i}"
        await client.hset(
            queue.keys.job(job_id),
            {"name": "n", "data": "{}", "state": "waiting", "timestamp": "1"},
        )
        await client.xadd(stream, [("jobId", job_id), ("name", "n")])
        named.append(job_id)
    for i in range(FOREIGN_BARE):
        await client.xadd(stream, [("foo", f"{tag}-{i}"), ("bar", "baz")])
    return named


async def _quarantine(queue: Queue[Any, Any]) -> list[dict[bytes, bytes]]:
    client = await _raw(queue)
    key = queue.keys.stream.removesuffix("stream") + "quarantine"
    entries = await client.xrange(key, MinId(), MaxId())
    return [dict(fields) for fields in (entries or {}).values()]


async def _check_quarantined(queue: Queue[Any, Any], named: list[str], tag: str) -> None:
    client = await _raw(queue)
    kept = await _tagged(queue, tag)
    assert len(kept) == FOREIGN_NAMED + FOREIGN_BARE
    for e in kept:
        assert e[b"glidemqReason"].startswith(b"stream entry ")
        assert b"no 'id' field" in e[b"glidemqReason"]
        assert b"glidemqEntryId" in e
    assert {e[b"jobId"].decode() for e in kept if b"jobId" in e} == set(named)
    assert sum(1 for e in kept if e.get(b"bar") == b"baz") == FOREIGN_BARE
    for job_id in named:
        h = await client.hgetall(queue.keys.job(job_id))
        assert h[b"state"] == b"failed", h
        assert b"no 'id' field" in h[b"failedReason"]
    # nothing of it is left in the stream or its PEL
    left = await client.xrange(queue.keys.stream, MinId(), MaxId())
    assert not any(tag.encode() in b"".join(v for f in fs for v in f) for fs in left.values())


@pytest.mark.parametrize("path", ["fetch", "blocking"])
async def test_foreign_entries_are_quarantined_and_our_jobs_still_run(
    queue: Queue[Any, Any],
    conn: ConnectionOptions,
    path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ours_before = [await queue.add("ours", i) for i in range(5)]
    events: list[tuple[str, str]] = []

    async def noop(job: Job[Any, Any]) -> int:
        return int(job.data)

    # a long block: in the "blocking" case the first foreign entry reaches a waiting read
    settings = {**FAST, "block_timeout": 10_000}
    worker: Worker[Any, Any] = Worker(queue.name, noop, connection=conn, concurrency=4, **settings)
    worker.on("quarantined", lambda entry_id, reason: events.append((entry_id, reason)))
    if path == "fetch":  # entries there before the worker: the non-blocking fetch reads them
        named = await _write_foreign(queue, path)
    caplog.set_level(logging.WARNING, logger="glidemq.worker")
    async with worker:
        if path == "blocking":  # the worker waits in XREADGROUP BLOCK when they arrive
            await wait_for(lambda: worker.completed_count == 5, timeout=15)
            await asyncio.sleep(0.3)
            named = await _write_foreign(queue, path)
        ours_after = [await queue.add("ours", i) for i in range(5)]
        for job in ours_before + ours_after:
            assert job is not None
            assert await job.wait_until_finished(timeout=20) == "completed"
        await wait_for(lambda: len(events) >= FOREIGN_NAMED + FOREIGN_BARE, timeout=15)
    assert len(events) == FOREIGN_NAMED + FOREIGN_BARE
    await _check_quarantined(queue, named, path)
    client = await _raw(queue)
    assert (
        await client.hget(queue.keys.meta, "quarantined")
        == str(FOREIGN_NAMED + FOREIGN_BARE).encode()
    )
    logged = [r for r in caplog.records if "quarantine" in r.getMessage()]
    assert logged, "the worker logs what it moved aside"
    stream_events = await client.xrange(queue.keys.events, MinId(), MaxId())
    kinds = [_pairs([x for f in fs for x in f]).get(b"event") for fs in stream_events.values()]
    assert kinds.count(b"quarantined") == FOREIGN_NAMED + FOREIGN_BARE
    counts = await queue.get_job_counts()
    assert (counts.waiting, counts.active, counts.completed) == (0, 0, 10), counts


async def test_foreign_entry_read_while_paused_is_quarantined_not_dropped(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def noop(job: Job[Any, Any]) -> None:
        return None

    settings = {**FAST, "block_timeout": 10_000}
    async with Worker(queue.name, noop, connection=conn, **settings) as worker:
        await asyncio.sleep(0.3)  # in its blocking read
        worker.pause()  # what that read returns now is handed back (deferActive)
        await _write_foreign(queue, "paused")
        await wait_for(lambda: _tagged(queue, "paused"), timeout=15)
    client = await _raw(queue)
    left = await client.xrange(queue.keys.stream, MinId(), MaxId())
    # every entry is still somewhere an operator sees it: the stream or the quarantine
    assert len(left) + len(await _tagged(queue, "paused")) == FOREIGN_NAMED + FOREIGN_BARE


async def _tagged(queue: Queue[Any, Any], tag: str) -> list[dict[bytes, bytes]]:
    return [e for e in await _quarantine(queue) if tag.encode() in b"".join(e.values())]
