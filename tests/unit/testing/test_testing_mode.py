"""What only the in-memory engine has: the manual clock, settle(), servers chosen by
`connection`, and its refusals. (Shared behaviour is in tests/behaviour, on all backends.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import GlideMQError, Job, JobTimeoutError, UnsupportedOptionError, ValidationError
from glidemq.sandbox import SandboxOptions
from glidemq.testing import (
    ManualClock,
    MemoryServer,
    TestJob,
    TestQueue,
    TestQueueEvents,
    TestWorker,
    default_server,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_000_000)


@pytest.fixture
def server(clock: ManualClock) -> MemoryServer:
    return MemoryServer(clock=clock)


async def test_manual_clock_runs_delays_and_backoff_only_when_advanced(
    clock: ManualClock, server: MemoryServer
) -> None:
    runs: list[int] = []

    async def flaky(job: Job[Any, str]) -> str:
        runs.append(clock.now_ms())
        if len(runs) < 3:
            raise RuntimeError("again")
        return "ok"

    queue: TestQueue[Any, str] = TestQueue("q", connection=server)
    job = await queue.add(
        "j", None, {"delay": 5000, "attempts": 3, "backoff": {"type": "exponential", "delay": 100}}
    )
    assert job is not None
    async with TestWorker("q", flaky, connection=server):
        await queue.settle()
        assert runs == [] and await job.get_state() == "delayed"
        clock.advance(5000)
        await queue.settle()
        assert runs == [1_005_000] and await job.get_state() == "delayed"
        clock.advance(99)
        await queue.settle()
        assert len(runs) == 1
        clock.advance(1)
        await queue.settle()
        clock.advance(200)
        await queue.settle()
    assert runs == [1_005_000, 1_005_100, 1_005_300]
    assert (await job.refresh()).returnvalue == "ok"
    assert job.finished_on == 1_005_300


async def test_settle_times_out_on_a_processor_that_never_returns(server: MemoryServer) -> None:
    async def hang(job: Job[Any, None]) -> None:
        await asyncio.sleep(30)

    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    await queue.add("j", None)
    async with TestWorker("q", hang, connection=server, close_timeout=0):
        with pytest.raises(JobTimeoutError):
            await queue.settle(timeout=0.1)


async def test_settle_without_a_worker_returns_at_once(server: MemoryServer) -> None:
    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    await queue.add("j", None)
    await queue.settle(timeout=1)
    assert await queue.count() == 1


async def test_manual_clock_refuses_to_go_back(clock: ManualClock) -> None:
    with pytest.raises(ValidationError):
        clock.advance(-1)
    clock.set(0)  # in the past: no change
    assert clock.now_ms() == 1_000_000


async def test_queues_and_workers_meet_by_server_and_name() -> None:
    url = "valkey://example.invalid:6379"
    done = asyncio.Event()

    async def work(job: Job[Any, None]) -> None:
        done.set()

    other: TestQueue[Any, Any] = TestQueue("q", connection=MemoryServer())
    queue: TestQueue[Any, Any] = TestQueue("q", connection=url)
    await other.add("elsewhere", None)
    await queue.add("here", None)
    async with TestWorker("q", work, connection=url):
        await asyncio.wait_for(done.wait(), 5)
        await queue.settle()
    assert (await queue.get_job_counts()).completed == 1
    assert await other.count() == 1
    assert TestQueue("q").server is default_server()
    with pytest.raises(ValidationError):
        TestQueue("q", connection=42)  # type: ignore[arg-type]


async def test_jobs_are_glidemq_jobs_and_snapshots(server: MemoryServer) -> None:
    queue: TestQueue[dict[str, int], Any] = TestQueue("q", connection=server)
    data = {"n": 1}
    job = await queue.add("j", data)
    assert isinstance(job, Job) and isinstance(job, TestJob)
    data["n"] = 2  # the stored copy does not change
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.data == {"n": 1}
    assert stored.queue_name == "q" and repr(stored).startswith("<Job q:")


async def test_closed_queue_refuses_work(server: MemoryServer) -> None:
    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    await queue.close()
    with pytest.raises(GlideMQError, match="closed"):
        await queue.add("j", None)
    with pytest.raises(ValidationError):
        TestQueue("bad:name", connection=server)


async def test_unemulated_options_are_refused_not_ignored(server: MemoryServer) -> None:
    with pytest.raises(UnsupportedOptionError) as info:
        TestWorker("q", lambda job: None, connection=server, sandbox=SandboxOptions())
    assert info.value.field == "sandbox"
    with pytest.raises(ValidationError):  # unknown names fail as on a real Worker
        TestWorker("q", lambda job: None, connection=server, concurency=2)
    with pytest.raises(ValidationError):
        TestWorker("q", "app:processor", connection=server)


async def test_queue_events_replay_from_an_id(server: MemoryServer) -> None:
    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    first = await queue.add("a", None)
    await queue.add("b", None)
    assert first is not None
    async with TestQueueEvents("q", connection=server, last_id="0") as events:
        got = [await events.next(timeout=1), await events.next(timeout=1)]
    assert [(e.event, e.fields["name"]) for e in got] == [("added", "a"), ("added", "b")]
    assert got[0].job_id == first.id


async def test_sync_processor_uses_job_methods_from_its_thread(server: MemoryServer) -> None:
    loop = asyncio.get_running_loop()

    def work(job: Job[Any, str]) -> str:
        asyncio.run_coroutine_threadsafe(job.update_progress(70), loop).result(5)
        asyncio.run_coroutine_threadsafe(job.log("from a thread"), loop).result(5)
        return "ok"

    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    job = await queue.add("j", None)
    assert job is not None
    async with TestWorker("q", work, connection=server):
        assert await job.wait_until_finished(timeout=5) == "completed"
    assert job.progress == 70
    assert await queue.get_job_logs(job.id) == (["from a thread"], 1)


async def test_move_to_delayed_with_next_step(clock: ManualClock, server: MemoryServer) -> None:
    steps: list[str | None] = []

    async def stepper(job: Job[Any, str]) -> str:
        steps.append(job.step)
        if job.step is None:
            await job.move_to_delayed(clock.now_ms() + 10, next_step="second")
        return "done"

    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    job = await queue.add("j", None)
    assert job is not None
    async with TestWorker("q", stepper, connection=server):
        await queue.settle()
        clock.advance(10)
        await queue.settle()
    assert steps == [None, "second"]
    assert (await job.refresh()).state == "completed" and job.step == "second"


async def test_flows_may_mix_queues_of_any_slot_in_memory(server: MemoryServer) -> None:
    from glidemq import FlowJob
    from glidemq.keys import queue_slot
    from glidemq.testing import TestFlowProducer

    assert queue_slot("reports") != queue_slot("words")  # CrossSlotError on a cluster
    reports = TestQueue("reports", connection=server)

    async def process(job: Job[Any, Any]) -> Any:
        if job.name == "report":
            return sorted((await job.get_children_values()).items())
        return job.data * 2

    async with TestFlowProducer(connection=server) as flows:
        node = await flows.add(
            FlowJob("report", "reports", children=[FlowJob("double", "words", 21)])
        )
    async with (
        TestWorker("reports", process, connection=server),
        TestWorker("words", process, connection=server),
    ):
        await reports.settle()
        await TestQueue("words", connection=server).settle()
        await reports.settle()
    done = await reports.get_job(node.job.id)
    assert done is not None and done.returnvalue == [[f"words:{node.children[0].job.id}", 42]]
    await flows.close()
    with pytest.raises(GlideMQError):
        await flows.add(FlowJob("late", "reports"))


async def test_schedulers_fire_on_the_manual_clock_only(
    clock: ManualClock, server: MemoryServer
) -> None:
    queue = TestQueue("jobs", connection=server)
    ran: list[int] = []

    async def record(job: Job[Any, Any]) -> None:
        ran.append(clock.now_ms())

    s = await queue.upsert_job_scheduler("tick", every_ms=60_000, start_date=clock.now_ms())
    async with TestWorker("jobs", record, connection=server):
        await queue.settle()
        assert ran == [s.next_run]
        clock.advance(59_999)
        await queue.settle()
        assert len(ran) == 1  # not due yet
        clock.advance(1)
        await queue.settle()
        clock.advance(10 * 60_000)  # ten missed runs fire once, not ten times
        await queue.settle()
    assert len(ran) == 3
    later = await queue.get_job_scheduler("tick")
    assert later is not None and later.count == 3
    assert later.next_run == s.next_run + 12 * 60_000  # still on the grid


async def test_broadcasts_reach_subscribers_on_a_memory_server(server: MemoryServer) -> None:
    # nothing of Broadcast knows the server: it runs on `server.options` like on a URL
    from glidemq import Broadcast, BroadcastWorker

    got: list[Any] = []

    async def record(job: Any) -> None:
        got.append(job.data)

    async with BroadcastWorker("news", "mail", record, connection=server.options):
        async with Broadcast("news", connection=server.options) as news:
            await news.publish("story", {"n": 1})
            await news.publish("story", {"n": 2})
        for _ in range(200):
            if len(got) == 2:
                break
            await asyncio.sleep(0.01)
    assert got == [{"n": 1}, {"n": 2}]
