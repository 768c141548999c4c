"""Pages of `Queue.get_jobs` read the stream and the sets in chunks (so a page near the front
of a million-job queue does not read the whole queue): pages that straddle a chunk boundary,
and the LIFO list after the stream, come out complete and in run order."""

from __future__ import annotations

from typing import Any

from glidemq import ConnectionOptions, Queue


def _ids(jobs: list[Any]) -> list[str]:
    return [j.id for j in jobs if j is not None]


async def test_waiting_pages_across_chunks_then_the_lifo_jobs_newest_first(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    async with Queue(queue_name, connection=standalone_conn) as q:
        try:
            fifo = _ids(await q.add_bulk([("f", i) for i in range(2300)]))
            lifo = _ids(await q.add_bulk([("l", i, {"lifo": True}) for i in range(3)]))
            order = fifo + lifo[::-1]
            for start, end in ((0, 9), (995, 1004), (1999, 2001), (2295, 2302)):
                got = _ids(await q.get_jobs("waiting", start, end))
                assert got == order[start : end + 1], (start, end)
            assert len(await q.get_jobs("waiting", 0, -1)) == len(order)
        finally:
            await q.obliterate(force=True)


async def test_delayed_pages_across_chunks_in_due_order(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    async with Queue(queue_name, connection=standalone_conn) as q:
        try:
            ids = _ids(
                await q.add_bulk([("d", i, {"delay": 600_000 + i * 10}) for i in range(1200)])
            )
            await q.add("p", 0, {"priority": 3})  # a prioritized job shares the set
            for start, end in ((0, 4), (997, 1003), (1195, 1199)):
                got = _ids(await q.get_jobs("delayed", start, end))
                assert got == ids[start : end + 1], (start, end)
            assert len(await q.get_jobs("prioritized", 0, -1)) == 1
        finally:
            await q.obliterate(force=True)


async def test_waiting_pages_skip_the_running_jobs_before_them(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    import asyncio

    from glidemq import Job, Worker
    from tests.helpers import FAST, wait_for

    release = asyncio.Event()
    started: list[str] = []

    async def hold(job: Job[Any, Any]) -> None:
        started.append(job.id)
        await release.wait()

    async with Queue(queue_name, connection=standalone_conn) as q:
        try:
            ids = _ids(await q.add_bulk([("w", i) for i in range(1500)]))
            async with Worker(
                queue_name, hold, connection=standalone_conn, concurrency=4, prefetch=4, **FAST
            ):
                await wait_for(lambda: len(started) == 4, timeout=20)
                await q.pause()  # nothing more starts while the pages are read
                waiting = [i for i in ids if i not in set(started)]
                assert (await q.get_job_counts()).waiting == len(waiting)
                for start, end in ((0, 2), (3, 7), (995, 1004), (1490, 1499)):
                    got = _ids(await q.get_jobs("waiting", start, end))
                    assert got == waiting[start : end + 1], (start, end)
                release.set()
        finally:
            await q.obliterate(force=True)


async def test_clean_reads_waiting_and_delayed_jobs_in_chunks_and_removes_the_right_ones(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    async with Queue(queue_name, connection=standalone_conn) as q:
        try:
            waiting = _ids(await q.add_bulk([("w", i) for i in range(2500)]))
            delayed = _ids(
                await q.add_bulk([("d", i, {"delay": 600_000 + i}) for i in range(1500)])
            )
            await q.add("p", 0, {"priority": 4})  # a prioritized job shares the scheduled set
            # A limit that ends inside the second chunk, then the rest.
            first = await q.clean(0, 1200, "waiting")
            assert first == waiting[:1200]
            rest = await q.clean(0, 5000, "waiting")
            assert rest == waiting[1200:]
            assert await q.clean(0, 1100, "delayed") == delayed[:1100]
            assert await q.clean(0, 5000, "delayed") == delayed[1100:]
            c = await q.get_job_counts()
            assert (c.waiting, c.delayed, c.prioritized) == (0, 0, 1)
        finally:
            await q.obliterate(force=True)
