"""A wait for a job that runs out says why: no worker serves the queue (read from the
workers registry), or the queue is paused; a wait during a server outage says which server
was lost and since when, and gives up at the wait's own time, not the client's."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

import glidemq
from glidemq import ConnectionOptions, JobTimeoutError, Queue, Worker, sync
from glidemq.server import EmbeddedValkey
from tests.helpers import FAST, wait_for


async def test_a_wait_with_no_worker_says_no_worker_runs_for_the_queue(
    queue: Queue[Any, Any],
) -> None:
    job = await queue.add("welcome", {"to": "ada@example.com"})
    assert job is not None
    with pytest.raises(JobTimeoutError) as waited:
        await job.wait_until_finished(timeout=0.5)
    assert f"no worker is running for queue {queue.name!r}" in str(waited.value)
    assert "still waiting after 0.5 s" in str(waited.value)
    with pytest.raises(JobTimeoutError) as asked:
        await queue.add_and_wait("welcome", {}, timeout=0.5)
    assert f"no worker is running for queue {queue.name!r}" in str(asked.value)


async def test_a_live_worker_is_not_called_missing_and_a_pause_is_named(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async def never(job: Any) -> None:
        raise AssertionError("nothing runs here")

    job = await queue.add("later", {}, {"delay": 60_000})
    assert job is not None
    async with Worker(queue.name, never, connection=conn, **FAST):
        await wait_for(queue.get_workers)
        with pytest.raises(JobTimeoutError) as waited:
            await job.wait_until_finished(timeout=0.3)
        assert "still delayed" in str(waited.value)
        assert "no worker" not in str(waited.value)
    await queue.pause()
    paused = await queue.add("held", {})
    assert paused is not None
    with pytest.raises(JobTimeoutError, match=f"queue {queue.name!r} is paused"):
        await paused.wait_until_finished(timeout=0.3)


def test_the_sync_result_of_a_task_with_no_worker_names_the_queue(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    @glidemq.task(queue_name, connection=standalone_conn)
    def send(to: str) -> str:
        return to

    job = send.delay("ada@example.com")
    assert job is not None
    try:
        with pytest.raises(JobTimeoutError, match=f"no worker is running for queue '{queue_name}'"):
            job.result(timeout=0.5)
    finally:
        with sync.Queue(queue_name, connection=standalone_conn) as q:
            q.obliterate(force=True)


async def test_a_wait_during_an_outage_names_the_server_and_gives_up_at_its_own_time() -> None:
    server = EmbeddedValkey().start()
    where = f"127.0.0.1:{server.port}"
    queue: Queue[Any, Any] = Queue("outage", connection=f"{server.url}?timeout_ms=3000")
    try:
        job = await queue.add("welcome", {})
        assert job is not None
        server.stop()
        with pytest.raises(glidemq.ConnectionError) as waited:
            await job.wait_until_finished(timeout=0.5)
        text = str(waited.value)
        assert f"no answer from the server at {where} within the 0.5 s wait" in text, text
        # The read cut off by the wait failed later on its own: from then on, the outage
        # record says since when calls to the server fail.
        await asyncio.sleep(0)  # let the cancelled read finish
        with pytest.raises(glidemq.ConnectionError) as read:
            await queue.get_job_counts()
        assert re.search(
            rf"connection to {where} lost at \d\d:\d\d:\d\d \(\d+\.\d s ago\)", str(read.value)
        ), str(read.value)
    finally:
        await queue.close()
        server.stop()


def test_a_sync_add_during_an_outage_says_what_happened_with_the_real_timeout() -> None:
    server = EmbeddedValkey().start()
    where = f"127.0.0.1:{server.port}"
    queue: sync.Queue[Any, Any] = sync.Queue("outage", connection=f"{server.url}?timeout_ms=1500")
    try:
        assert queue.add("first", {}) is not None
        server.stop()
        with pytest.raises((glidemq.OperationTimeoutError, glidemq.ConnectionError)) as added:
            queue.add("second", {})
        text = str(added.value)
        assert "30 s" not in text, text  # the client's request timeout, not the call's limit
        assert where in text and "lost at" in text, text
        if isinstance(added.value, glidemq.OperationTimeoutError):
            assert f"no reply from {where} within 1.5 s" in text, text
            assert "does not accept connections" in text, text
    finally:
        queue.close()
        server.stop()
