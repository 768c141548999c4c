"""Worker lifecycle: pause/resume, close and hand-back, revoke, sync processors, heartbeats,
events, and retention of finished jobs."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson

from glidemq import (
    ConnectionOptions,
    Job,
    JobOptions,
    KeepJobs,
    Queue,
    QueueEvent,
    QueueEvents,
    Worker,
)
from glidemq.errors import JobStateError
from tests.helpers import FAST, job_state, wait_for, wait_state


def _client(queue: Queue[Any, Any]) -> Any:
    assert queue._client is not None
    return queue._client


async def _pending_count(queue: Queue[Any, Any]) -> int:
    reply = await _client(queue).xpending(queue.keys.stream, "workers")
    return int(reply[0])


async def _consumers(queue: Queue[Any, Any]) -> list[str]:
    infos = await _client(queue).xinfo_consumers(queue.keys.stream, "workers")
    return [info[b"name"].decode() for info in infos]


# ------------------------------------------------------------------------ pause / resume


async def test_worker_pause_lets_running_jobs_finish_and_takes_no_new_ones(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    gate = asyncio.Event()
    started: list[int] = []
    finished: list[int] = []

    async def gated(job: Job[int, None]) -> None:
        started.append(job.data)
        await gate.wait()
        finished.append(job.data)

    await queue.add_bulk([("j", i) for i in range(6)])
    async with Worker(queue.name, gated, connection=conn, concurrency=2, **FAST) as worker:
        await wait_for(lambda: len(started) == 2)
        worker.pause()
        assert worker.is_paused()
        gate.set()
        await wait_for(lambda: len(finished) == 2)
        await asyncio.sleep(0.4)  # a worker that ignored pause would start more by now
        assert len(started) == 2

        async def both_recorded() -> bool:
            counts = await queue.get_job_counts()
            return counts.active == 0 and counts.completed == 2

        await wait_for(both_recorded)  # finishing the processor precedes the completion call
        assert len(started) == 2 and (await queue.get_job_counts()).waiting == 4
        worker.resume()
        assert not worker.is_paused()
        await wait_for(lambda: len(finished) == 6)
    assert sorted(finished) == list(range(6))


async def test_idle_worker_pause_takes_nothing_until_resume(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        done.append(job.id)

    async with Worker(queue.name, record, connection=conn, **FAST) as worker:
        await asyncio.sleep(0.2)  # idle: the worker waits on its blocking read
        worker.pause()
        job = await queue.add("while-paused", None)
        assert job is not None
        await asyncio.sleep(0.7)  # longer than block_timeout: any read in flight has ended
        assert done == []
        assert await job_state(queue, job.id) == "waiting"
        worker.resume()
        await wait_state(queue, job.id, "completed")
    assert done == [job.id]


async def test_queue_pause_stops_idle_worker_until_resume(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        done.append(job.id)

    async with Worker(queue.name, record, connection=conn, **FAST):
        await asyncio.sleep(0.2)
        await queue.pause()
        assert await queue.is_paused()
        assert (await queue.get_job_counts()).paused
        job = await queue.add("while-paused", None)
        assert job is not None
        await asyncio.sleep(0.7)
        assert done == []
        assert await job_state(queue, job.id) == "waiting"
        await queue.resume()
        assert not await queue.is_paused()
        await wait_state(queue, job.id, "completed")
    assert done == [job.id]


# ------------------------------------------------------------------------ close


async def _start_hanging_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions, n_jobs: int
) -> tuple[Worker[Any, Any], list[str]]:
    started: list[str] = []

    async def hang(job: Job[Any, None]) -> None:
        started.append(job.id)
        await asyncio.sleep(60)

    await queue.add_bulk([("hang", i) for i in range(n_jobs)])
    worker: Worker[Any, Any] = Worker(queue.name, hang, connection=conn, concurrency=3, **FAST)
    await worker.start()
    await wait_for(lambda: len(started) == 3)
    assert (await queue.get_job_counts()).active == 3
    return worker, started


async def _assert_handed_back(
    queue: Queue[Any, Any], worker: Worker[Any, Any], started: list[str], n_jobs: int
) -> None:
    counts = await queue.get_job_counts()
    assert counts.active == 0
    assert counts.waiting == n_jobs
    assert counts.completed == 0 and counts.failed == 0
    for job_id in started:
        assert await job_state(queue, job_id) == "waiting"
    assert await _pending_count(queue) == 0
    assert worker.consumer not in await _consumers(queue)


async def test_close_with_timeout_hands_hung_jobs_back(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    worker, started = await _start_hanging_worker(queue, conn, 5)
    await worker.close(timeout=0.1)
    await _assert_handed_back(queue, worker, started, 5)


async def test_close_force_hands_running_jobs_back(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    worker, started = await _start_hanging_worker(queue, conn, 4)
    await worker.close(force=True)
    await _assert_handed_back(queue, worker, started, 4)


async def test_handed_back_jobs_are_run_by_the_next_worker(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    worker, started = await _start_hanging_worker(queue, conn, 3)
    await worker.close(force=True)
    done: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        done.append(job.id)

    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_for(lambda: len(done) == 3)
    assert sorted(done) == sorted(started)


async def test_close_waits_for_running_jobs_within_timeout(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    started = asyncio.Event()

    async def short(job: Job[Any, str]) -> str:
        started.set()
        await asyncio.sleep(0.3)
        return "finished"

    job = await queue.add("short", None)
    assert job is not None
    worker = Worker(queue.name, short, connection=conn, **FAST)
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await worker.close(timeout=5)
    final = await queue.get_job(job.id)
    assert final is not None and final.state == "completed"
    assert final.returnvalue == "finished"


async def test_second_close_is_a_no_op(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    async def noop(job: Job[Any, None]) -> None:
        return None

    closed: list[str] = []
    worker = Worker(queue.name, noop, connection=conn, **FAST)
    worker.on("closed", lambda: closed.append("closed"))
    await worker.start()
    await worker.close()
    await worker.close()
    await worker.close(force=True)
    assert closed == ["closed"]
    assert not worker.is_running()


async def test_close_hands_back_entries_read_but_not_yet_activated(
    queue: Queue[Any, Any],
) -> None:
    # A worker's blocking read can return entries just as the worker closes, before they are
    # activated: the close-time hand-back must return them to the queue, not drop them.
    job = await queue.add("in-flight", None)
    assert job is not None
    client = _client(queue)
    await client.xgroup_create(queue.keys.stream, "workers", "0")
    await client.custom_command(
        ["XREADGROUP", "GROUP", "workers", "ghost", "COUNT", "1", "STREAMS", queue.keys.stream, ">"]
    )
    assert await _pending_count(queue) == 1
    await client.fcall("glidemq_deferActive", [queue.keys.stream, queue.keys.events], ["ghost"])
    assert await _pending_count(queue) == 0
    assert await job_state(queue, job.id) == "waiting"
    assert (await queue.get_job_counts()).waiting == 1


# ------------------------------------------------------------------------ revoke


async def test_revoking_a_running_job_aborts_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hang(job: Job[Any, None]) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = await queue.add("long", None, JobOptions(attempts=3))
    assert job is not None
    async with Worker(queue.name, hang, connection=conn, lock_duration=600, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 10)
        assert await queue.revoke(job.id) == "flagged"
        # heartbeat every lock_duration / 3 = 0.2 s; allow generous slack
        final = await wait_state(queue, job.id, "failed", timeout=3)
        assert cancelled.is_set()
        assert worker.active_count == 0
    assert final.failed_reason == "revoked"
    assert final.revoked
    assert final.attempts_made == 1  # final despite attempts left
    counts = await queue.get_job_counts()
    assert counts.active == 0 and counts.failed == 1 and counts.waiting == 0


async def test_revoking_a_waiting_job_fails_it_without_running(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ran: list[str] = []

    async def record(job: Job[Any, None]) -> None:
        ran.append(job.id)

    revoked = await queue.add("revoked", None)
    other = await queue.add("other", None)
    assert revoked is not None and other is not None
    assert await queue.revoke(revoked.id) == "revoked"
    stored = await queue.get_job(revoked.id)
    assert stored is not None and stored.state == "failed" and stored.failed_reason == "revoked"
    async with Worker(queue.name, record, connection=conn, **FAST):
        await wait_state(queue, other.id, "completed")
    assert ran == [other.id]
    assert await job_state(queue, revoked.id) == "failed"
    try:
        await queue.revoke(revoked.id)
    except JobStateError:
        pass
    else:
        raise AssertionError("revoking a finished job must raise JobStateError")


# ------------------------------------------------------------------------ sync processor


async def test_sync_processor_runs_in_a_thread(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def blocking(job: Job[dict[str, int], int]) -> int:
        threads.append(threading.get_ident())
        return job.data["n"] + 1

    job = await queue.add("sync", {"n": 41})
    assert job is not None
    async with Worker(queue.name, blocking, connection=conn, **FAST):
        final = await wait_state(queue, job.id, "completed")
    assert final.returnvalue == 42
    assert threads and threads[0] != loop_thread


# ------------------------------------------------------------------------ heartbeat


async def test_long_job_is_not_reclaimed_while_its_worker_heartbeats(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    runs: list[str] = []
    stalled: list[tuple[int, int]] = []

    async def long(job: Job[Any, str]) -> str:
        runs.append(job.id)
        await asyncio.sleep(1.5)  # 3 x lock_duration
        return "once"

    settings: dict[str, Any] = {"lock_duration": 500, "stalled_interval": 200, **FAST}
    job = await queue.add("long", None)
    assert job is not None
    worker_a = Worker(queue.name, long, connection=conn, **settings)
    await worker_a.start()
    try:
        await wait_state(queue, job.id, "active")
        worker_b = Worker(queue.name, long, connection=conn, **settings)
        worker_b.on("stalled", lambda r, f: stalled.append((r, f)))
        worker_a.on("stalled", lambda r, f: stalled.append((r, f)))
        async with worker_b:
            final = await wait_state(queue, job.id, "completed", timeout=5)
            await asyncio.sleep(0.3)  # a duplicate run would have started by now
    finally:
        await worker_a.close()
    assert runs == [job.id]
    assert stalled == []
    assert final.returnvalue == "once"
    assert final.stalled_count == 0
    assert worker_a.completed_count == 1 and worker_b.completed_count == 0
    counts = await queue.get_job_counts()
    assert counts.completed == 1 and counts.active == 0 and counts.waiting == 0


# ------------------------------------------------------------------------ events


async def test_worker_emits_lifecycle_events(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    log: list[tuple[str, Any]] = []

    async def processor(job: Job[str, str]) -> str:
        if job.data == "bad":
            raise RuntimeError("bad data")
        await job.update_progress(50)
        return job.data.upper()

    ok = await queue.add("ok", "good")
    bad = await queue.add("bad", "bad")
    assert ok is not None and bad is not None
    worker = Worker(queue.name, processor, connection=conn, **FAST)
    worker.on("active", lambda j: log.append(("active", j.id)))
    worker.on("completed", lambda j, rv: log.append(("completed", (j.id, rv))))
    worker.on("failed", lambda j, e: log.append(("failed", (j.id, str(e)))))
    worker.on("progress", lambda j, p: log.append(("progress", (j.id, p))))
    worker.on("drained", lambda: log.append(("drained", None)))
    worker.on("closing", lambda: log.append(("closing", None)))
    worker.on("closed", lambda: log.append(("closed", None)))
    await worker.start()
    try:
        await wait_for(lambda: {"completed", "failed", "drained"} <= {n for n, _ in log})
    finally:
        await worker.close()
    names = [name for name, _ in log]
    assert ("active", ok.id) in log and ("active", bad.id) in log
    assert ("completed", (ok.id, "GOOD")) in log
    assert ("progress", (ok.id, 50)) in log
    assert names.index("progress") < names.index("completed")
    assert ("failed", (bad.id, "bad data")) in log
    # drained: nothing left to take, so only after a job was taken (it may come while a
    # result is still being recorded, or before a held job's run begins: `active` fires
    # where the run begins)
    assert names.index("drained") > names.index("active")
    assert names[-2:] == ["closing", "closed"]
    assert names.count("closed") == 1


async def test_queue_events_follow_a_jobs_life(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    seen: list[QueueEvent] = []

    async def processor(job: Job[str, Any]) -> Any:
        if job.data == "bad":
            raise RuntimeError("it broke")
        await job.update_progress(50)
        await job.update_progress({"step": "two"})
        return {"ok": True, "n": 3}

    async with QueueEvents(queue.name, connection=conn, block_timeout=200) as events:
        events.on("*", seen.append)
        good = await queue.add("good", "good")
        bad = await queue.add("bad", "bad")
        assert good is not None and bad is not None
        async with Worker(queue.name, processor, connection=conn, **FAST):
            await wait_for(
                lambda: (
                    any(e.event == "failed" and e.job_id == bad.id for e in seen)
                    and any(e.event == "completed" and e.job_id == good.id for e in seen)
                )
            )

    def of(job_id: str) -> list[QueueEvent]:
        return [e for e in seen if e.job_id == job_id]

    good_events = [e.event for e in of(good.id)]
    assert good_events == ["added", "active", "progress", "progress", "completed"]
    added = of(good.id)[0]
    assert added.fields["name"] == "good"
    progress = [e.fields["data"] for e in of(good.id) if e.event == "progress"]
    assert [orjson.loads(p) for p in progress] == [50, {"step": "two"}]
    completed = of(good.id)[-1]
    assert orjson.loads(completed.fields["returnvalue"]) == {"ok": True, "n": 3}

    bad_events = [e.event for e in of(bad.id)]
    assert bad_events == ["added", "active", "failed"]
    assert of(bad.id)[-1].fields["failedReason"] == "it broke"


async def test_worker_with_events_off_writes_no_job_events(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def noop(job: Job[Any, None]) -> None:
        return None

    job = await queue.add("quiet", None)
    assert job is not None
    before = await _client(queue).xlen(queue.keys.events)
    async with Worker(queue.name, noop, connection=conn, events=False, **FAST):
        await wait_state(queue, job.id, "completed")
    assert await _client(queue).xlen(queue.keys.events) == before


# ------------------------------------------------------------------------ retention


async def _job_ids_left(queue: Queue[Any, Any], ids: list[str]) -> list[str]:
    left = []
    for job_id in ids:
        if await queue.get_job(job_id) is not None:
            left.append(job_id)
    return left


async def _run_all(
    queue: Queue[Any, Any],
    conn: ConnectionOptions,
    jobs: list[tuple[str, Any, Any]],
    fail: bool = False,
    **worker_opts: Any,
) -> list[str]:
    added = await queue.add_bulk(jobs)
    ids = [j.id for j in added if j is not None]
    processed: list[str] = []

    async def processor(job: Job[Any, Any]) -> Any:
        processed.append(job.id)
        if fail:
            raise RuntimeError("fail")
        return job.data

    async with Worker(queue.name, processor, connection=conn, **FAST, **worker_opts) as w:
        await wait_for(lambda: w.completed_count + w.failed_count == len(ids))
    assert sorted(processed) == sorted(ids)
    return ids


async def test_remove_on_complete_true_on_the_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(
        queue,
        conn,
        [("r", 1, {"remove_on_complete": True}), ("k", 2, None)],
    )
    assert await _job_ids_left(queue, ids) == [ids[1]]
    assert (await queue.get_job_counts()).completed == 1


async def test_remove_on_complete_count_as_worker_default(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(queue, conn, [("j", i, None) for i in range(6)], remove_on_complete=2)
    left = await _job_ids_left(queue, ids)
    assert len(left) == 2
    assert (await queue.get_job_counts()).completed == 2
    completed = await queue.get_jobs("completed")
    assert sorted(j.id for j in completed) == sorted(left)


async def test_job_retention_overrides_worker_default(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(
        queue,
        conn,
        [
            ("keep", 1, {"remove_on_complete": False}),
            ("drop", 2, None),
            ("keep3", 3, {"remove_on_complete": 5}),
        ],
        remove_on_complete=True,
    )
    assert await _job_ids_left(queue, ids) == [ids[0], ids[2]]


async def test_keep_jobs_count_zero_on_the_job_keeps_none(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(
        queue, conn, [("drop", 1, JobOptions(remove_on_complete=KeepJobs(count=0)))]
    )
    assert await _job_ids_left(queue, ids) == []
    assert (await queue.get_job_counts()).completed == 0


async def test_keep_jobs_age_drops_older_finished_jobs(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    old = await _run_all(
        queue, conn, [("old", i, None) for i in range(3)], remove_on_complete=KeepJobs(age=1)
    )
    assert len(await _job_ids_left(queue, old)) == 3  # younger than 1 s: all kept
    await asyncio.sleep(1.1)
    new = await _run_all(queue, conn, [("new", 0, None)], remove_on_complete=KeepJobs(age=1))
    assert await _job_ids_left(queue, old + new) == new
    assert (await queue.get_job_counts()).completed == 1


async def test_remove_on_fail_true_as_worker_default(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(
        queue, conn, [("f", i, None) for i in range(3)], fail=True, remove_on_fail=True
    )
    assert await _job_ids_left(queue, ids) == []
    assert (await queue.get_job_counts()).failed == 0


async def test_remove_on_fail_count_on_the_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(
        queue, conn, [("f", i, {"remove_on_fail": 1}) for i in range(4)], fail=True
    )
    left = await _job_ids_left(queue, ids)
    assert len(left) == 1
    assert (await queue.get_job_counts()).failed == 1


async def test_remove_on_fail_on_the_job_overrides_worker_default(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    ids = await _run_all(
        queue,
        conn,
        [("keep", 1, {"remove_on_fail": False}), ("drop", 2, None)],
        fail=True,
        remove_on_fail=True,
    )
    assert await _job_ids_left(queue, ids) == [ids[0]]
    stored = await queue.get_job(ids[0])
    assert stored is not None and stored.failed_reason == "fail"


async def test_remove_on_fail_keep_jobs_age_on_the_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    old = await _run_all(queue, conn, [("old", 0, {"remove_on_fail": {"age": 1}})], fail=True)
    await asyncio.sleep(1.1)
    new = await _run_all(queue, conn, [("new", 0, {"remove_on_fail": {"age": 1}})], fail=True)
    assert await _job_ids_left(queue, old + new) == new
