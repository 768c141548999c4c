"""A completion flush that fails with anything (not only a GlideMQError) lets go of its
batch: the jobs leave the worker's table, so their heartbeat stops and stall recovery runs
them again, instead of the worker holding (and renewing) them forever. The fault is
injected into the wire call of `glidemq_completeAndFetchNext` once; the server is real."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.wire import fetch as wire_fetch
from tests.helpers import FAST, wait_for


async def test_a_flush_failing_with_any_error_lets_go_of_its_batch(
    queue: Queue[Any, Any], conn: ConnectionOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = wire_fetch.complete_and_fetch_next
    calls: list[int] = []

    async def first_one_breaks(*args: Any) -> Any:
        completions = args[5]
        if completions:  # the first call that stores a completion (fetches store none)
            calls.append(len(completions))
            if len(calls) == 1:
                raise RuntimeError("a fault outside the error tree")
        return await real(*args)

    monkeypatch.setattr(wire_fetch, "complete_and_fetch_next", first_one_breaks)
    runs: list[str] = []

    async def work(job: Job[Any, Any]) -> str:
        runs.append(job.id)
        return "done"

    errors: list[BaseException] = []
    job = await queue.add("x", {})
    assert job is not None
    async with Worker(
        queue.name,
        work,
        connection=conn,
        lock_duration=1000,
        stalled_interval=300,
        **FAST,
    ) as worker:
        worker.on("error", errors.append)
        await wait_for(lambda: calls, timeout=30)
        # the failed flush gave the job up: the worker holds nothing
        await wait_for(lambda: worker.active_count == 0 and runs, timeout=10)
        assert any(isinstance(e, RuntimeError) for e in errors)

        async def completed() -> bool:
            stored = await queue.get_job(job.id)
            return stored is not None and stored.state == "completed"

        # no heartbeat keeps it any more: stall recovery runs it again (lock + slack)
        await wait_for(completed, timeout=30)
    assert runs == [job.id, job.id]


async def test_the_fetch_loop_outlives_a_fetch_failing_with_any_error(
    queue: Queue[Any, Any], conn: ConnectionOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = wire_fetch.complete_and_fetch_next
    calls: list[int] = []

    async def first_one_breaks(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the worker's first fetch
            raise RuntimeError("a fault outside the error tree")
        return await real(*args)

    monkeypatch.setattr(wire_fetch, "complete_and_fetch_next", first_one_breaks)
    errors: list[BaseException] = []
    job = await queue.add("x", {})
    assert job is not None

    async def work(j: Job[Any, Any]) -> str:
        return "done"

    worker = Worker(queue.name, work, connection=conn, **FAST)
    worker.on("error", errors.append)
    async with worker:
        await wait_for(lambda: worker.completed_count == 1, timeout=30)
    # the loop itself went on: no watchdog had to restart it ("no progress ...")
    assert len(calls) >= 2
    assert [type(e) for e in errors] == [RuntimeError]
