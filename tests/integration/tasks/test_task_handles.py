"""Task handles as producers on standalone and cluster Valkey: `await task.add(...)`,
`add_bulk`, `add_and_wait` (the result decoded by the return annotation), and the sync
`delay` / `sync.add_and_wait` from a thread."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

import glidemq
from glidemq import ConnectionOptions, JobFailedError, TaskArgumentError, Worker
from tests.helpers import FAST


@dataclass
class Receipt:
    total: int
    currency: str


async def test_add_add_bulk_and_add_and_wait(conn: ConnectionOptions, queue_name: str) -> None:
    @glidemq.task(queue_name, connection=conn, attempts=2, priority=3)
    async def charge(amount: int, currency: str = "EUR") -> Receipt:
        if amount < 0:
            raise glidemq.UnrecoverableError("negative amount")
        return Receipt(amount * 100, currency)

    queue: glidemq.Queue[Any, Any] = glidemq.Queue(queue_name, connection=conn)
    try:
        job = await charge.add(5)
        assert job is not None and job.name == "charge" and job.data == {"amount": 5}
        assert (job.opts.get("attempts"), job.priority) == (2, 3)
        bulk = await charge.add_bulk([{"amount": 1}, {"amount": 2, "currency": "USD"}])
        assert [j.data for j in bulk if j is not None] == [
            {"amount": 1},
            {"amount": 2, "currency": "USD"},
        ]
        with pytest.raises(TaskArgumentError):
            await charge.add("five")
        with pytest.raises(TaskArgumentError):
            await charge.add_bulk([{"amount": 1}, {"amount": "x"}])
        assert await queue.count() == 3  # the refused bulk added nothing
        async with Worker(queue_name, glidemq.task_processor(charge), connection=conn, **FAST):
            receipt = await charge.add_and_wait(7, currency="GBP")
            assert receipt == Receipt(700, "GBP")  # decoded into the annotated class
            with pytest.raises(JobFailedError, match="negative amount"):
                await charge.add_and_wait(-1)
            later = await charge.with_options(delay=60_000).add(1)
            assert later is not None and await later.get_state() == "delayed"
    finally:
        await queue.obliterate(force=True)
        await queue.close()


async def test_delay_from_sync_code_in_a_thread(conn: ConnectionOptions, queue_name: str) -> None:
    @glidemq.task(queue_name, connection=conn)
    def shout(text: str) -> str:
        return text.upper()

    queue: glidemq.Queue[Any, Any] = glidemq.Queue(queue_name, connection=conn)

    def producer() -> tuple[str, str, int]:
        job = shout.delay("hi")
        assert job is not None
        value = shout.sync.add_and_wait("there")
        jobs = shout.sync.add_bulk([{"text": "a"}, {"text": "b"}])
        return job.id, value, len(jobs)

    try:
        async with Worker(queue_name, glidemq.task_processor(shout), connection=conn, **FAST):
            job_id, value, n = await asyncio.to_thread(producer)
        assert value == "THERE" and n == 2
        stored = await queue.get_job(job_id)
        assert stored is not None and stored.data == {"text": "hi"}
    finally:
        await queue.obliterate(force=True)
        await queue.close()


async def test_configure_tasks_sets_where_undeclared_tasks_go(
    standalone_conn: ConnectionOptions, queue_name: str
) -> None:
    @glidemq.task(queue_name)
    async def ping() -> None: ...

    glidemq.configure_tasks(connection=standalone_conn, prefix="tasksprefix")
    queue: glidemq.Queue[Any, Any] = glidemq.Queue(
        queue_name, connection=standalone_conn, prefix="tasksprefix"
    )
    try:
        job = await ping.add()
        assert job is not None
        assert await queue.get_job(job.id) is not None
    finally:
        glidemq.configure_tasks()
        await queue.obliterate(force=True)
        await queue.close()
