"""Per-queue serializers: a msgpack queue round-trips what JSON cannot, and a Queue or
Worker whose serializer differs from the queue's is refused. Standalone, cluster, memory."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import SerializerMismatchError, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_state


def _queue(backend: Backend, serializer: str) -> Any:
    q = type(backend.queue)(backend.name, connection=backend.connection, serializer=serializer)
    backend.others.append(q)  # closed (and obliterated) with the backend
    return q


async def _echo(job: Any) -> Any:
    return {"got": job.data["blob"], b"raw-key": 1}


async def test_a_msgpack_queue_round_trips_bytes_in_data_and_results(backend: Backend) -> None:
    q = _queue(backend, "msgpack")
    data = {"blob": b"\x00\xffbinary", "n": 1}
    job = await q.add("pack", data)
    assert job is not None
    stored = await q.get_job(job.id)
    assert stored is not None and stored.data == data
    found = await q.search_jobs(state="waiting", data={"n": 1})  # the server cannot read it
    assert [j.id for j in found] == [job.id]  # ... the client checks it after decoding
    assert await q.search_jobs(state="waiting", data={"n": 2}) == []
    async with backend.worker(_echo, serializer="msgpack"):
        done = await wait_state(q, job.id, "completed")
    assert done.returnvalue == {"got": b"\x00\xffbinary", b"raw-key": 1}
    assert await q.get_result(job.id) == done.returnvalue


async def test_a_worker_or_queue_with_another_serializer_is_refused(backend: Backend) -> None:
    q = _queue(backend, "msgpack")
    assert await q.add("pack", {"n": 1}) is not None  # records msgpack for the queue
    worker = backend.worker(_echo)  # json
    with pytest.raises(SerializerMismatchError) as info:
        await worker.start()
    assert info.value.recorded == "msgpack" and info.value.wanted == "json"
    assert "serializer='msgpack'" in str(info.value)
    plain = _queue(backend, "json")
    with pytest.raises(SerializerMismatchError):
        await plain.add("plain", {"n": 2})
    assert await q.count() == 1  # nothing added by the refused queue


async def test_unknown_serializers_are_refused_at_construction(backend: Backend) -> None:
    with pytest.raises(ValidationError) as info:
        _queue(backend, "yaml")
    assert info.value.field == "serializer"
    with pytest.raises(ValidationError):
        backend.worker(_echo, serializer="yaml")
