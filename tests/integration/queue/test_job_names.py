"""A job's name is 1 to 1024 bytes (UTF-8) at every way in: Queue.add and add_bulk (plain,
deduplicated, delayed), glidemq.sync, task handles, Producer, FlowProducer and scheduler
templates refuse an empty or longer one with ValidationError before anything is sent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import glidemq
from glidemq import (
    ConnectionOptions,
    FlowJob,
    FlowProducer,
    Producer,
    Queue,
    ValidationError,
)

MAX_JOB_NAME = 1024  # glidemq.keys.MAX_JOB_NAME, the documented cap

BAD_NAMES = ["", "n" * (MAX_JOB_NAME + 1), "é" * (MAX_JOB_NAME // 2 + 1), "x" * 20_000_000]
IDS = ["empty", "1025 bytes", "1026 bytes of é", "20 million"]


async def _refused(field: str, call: Callable[[], Awaitable[Any]]) -> None:
    with pytest.raises(ValidationError) as info:
        await call()
    assert info.value.field == field, info.value
    assert len(str(info.value)) < 300  # the message does not quote the name


@pytest.mark.parametrize("name", BAD_NAMES, ids=IDS)
async def test_queue_adds_refuse_a_bad_name(queue: Queue[Any, Any], name: str) -> None:
    await _refused("name", lambda: queue.add(name, 1))
    await _refused("name", lambda: queue.add(name, 1, {"delay": 1000, "priority": 2}))
    await _refused("name", lambda: queue.add(name, 1, {"deduplication": {"id": "d"}}))
    await _refused("jobs[1].name", lambda: queue.add_bulk([("ok", 1), (name, 2)]))
    template = {"name": name}
    await _refused(
        "template.name", lambda: queue.upsert_job_scheduler("s", every_ms=1000, template=template)
    )
    assert await queue.count() == 0
    assert await queue.get_job_schedulers() == []


async def test_a_name_of_exactly_1024_bytes_is_added(queue: Queue[Any, Any]) -> None:
    name = "é" * (MAX_JOB_NAME // 2)
    job = await queue.add(name, 1)
    bulk = await queue.add_bulk([(name, 2)])
    assert job is not None and bulk[0] is not None
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.name == name


@pytest.mark.parametrize("name", BAD_NAMES[:2], ids=IDS[:2])
async def test_producer_and_flows_refuse_a_bad_name(
    queue: Queue[Any, Any], conn: ConnectionOptions, name: str
) -> None:
    async with Producer(queue.name, connection=conn) as producer:
        await _refused("name", lambda: producer.add(name, 1))
        await _refused("jobs[0].name", lambda: producer.add_bulk([(name, 1)]))
    async with FlowProducer(connection=conn) as flows:
        child = FlowJob(name, queue.name)
        for flow in (child, FlowJob("parent", queue.name, children=[child])):
            with pytest.raises(ValidationError) as info:  # the field names the flow's job
                await flows.add(flow)
            assert info.value.field.endswith(".name") and len(str(info.value)) < 300
    assert await queue.count() == 0


@pytest.mark.parametrize("name", BAD_NAMES[:2], ids=IDS[:2])
def test_task_handles_refuse_a_bad_name(queue_name: str, name: str) -> None:
    with pytest.raises(ValidationError) as info:

        @glidemq.task(queue_name, name=name)
        def work() -> None:
            return None

    assert info.value.field == "name"


@pytest.mark.parametrize("name", BAD_NAMES[:2], ids=IDS[:2])
def test_the_sync_queue_refuses_a_bad_name(
    standalone_conn: ConnectionOptions, queue_name: str, name: str
) -> None:
    from glidemq.sync import Queue as SyncQueue

    with SyncQueue(queue_name, connection=standalone_conn) as q:
        with pytest.raises(ValidationError) as info:
            q.add(name, 1)
        assert info.value.field == "name"
        with pytest.raises(ValidationError):
            q.add_bulk([(name, 1)])
        assert q.count() == 0
        q.obliterate(force=True)
