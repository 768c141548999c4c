"""How single adds reach the server: a lone add is one call of its own, adds made while
another is in flight share calls (two at a time when nothing else is in flight), and both
keep the order the adds were made in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import glidemq.queue.queue as queue_module
from glidemq import ConnectionOptions, Queue


def _fcalls(server: Any) -> int:
    """FCALLs the server ran since the last CONFIG RESETSTAT."""
    for line in server.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_fcall:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


@pytest.fixture
async def standalone_queue(
    standalone_conn: ConnectionOptions, queue_name: str
) -> AsyncIterator[Queue[Any, Any]]:
    q: Queue[Any, Any] = Queue(queue_name, connection=standalone_conn)
    await q._context()
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()


async def test_each_lone_add_is_one_call(
    standalone_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    valkey_server.cli("CONFIG", "RESETSTAT")
    jobs = [await standalone_queue.add("one", {"i": i}) for i in range(5)]
    assert _fcalls(valkey_server) == 5
    assert [j.data for j in jobs if j is not None] == [{"i": i} for i in range(5)]
    ids = [int(j.id) for j in jobs if j is not None]
    assert ids == sorted(ids) and len(set(ids)) == 5


async def test_adds_made_while_one_is_in_flight_share_calls_and_keep_their_order(
    standalone_queue: Queue[Any, Any], valkey_server: Any
) -> None:
    valkey_server.cli("CONFIG", "RESETSTAT")
    jobs = await asyncio.gather(*(standalone_queue.add("many", {"i": i}) for i in range(200)))
    # the first goes out alone at once; the other 199 were made meanwhile and share two
    # calls, sent back to back so that the client builds one while the server runs the other
    assert _fcalls(valkey_server) == 3
    ids = [int(j.id) for j in jobs if j is not None]
    assert len(ids) == 200 and ids == sorted(ids)
    assert await standalone_queue.get_job_counts() is not None
    waiting = await standalone_queue.get_jobs("waiting")
    assert [j.data["i"] for j in waiting] == list(range(200))


async def test_a_lone_add_with_a_taken_custom_id_is_skipped(
    standalone_queue: Queue[Any, Any],
) -> None:
    first = await standalone_queue.add("c", 1, {"job_id": "fixed"})
    assert first is not None and first.id == "fixed"
    assert await standalone_queue.add("c", 2, {"job_id": "fixed"}) is None


async def test_an_add_made_while_shared_calls_are_in_flight_joins_the_next_one(
    standalone_queue: Queue[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 callers that each add again as soon as their add returns: an add made while a
    # shared call is in flight joins the next shared call instead of going out alone.
    sent: list[str] = []
    real_send = queue_module.send

    async def counting_send(sender: Any, call: Any) -> Any:
        sent.append(call.function)
        return await real_send(sender, call)

    monkeypatch.setattr(queue_module, "send", counting_send)
    counter = iter(range(2000))
    done: list[int] = []

    async def lane() -> None:
        for i in counter:
            job = await standalone_queue.add("lane", {"i": i})
            assert job is not None
            done.append(i)

    await asyncio.gather(*(lane() for _ in range(50)))
    assert sorted(done) == list(range(2000))
    alone = sent.count("glidemq_add")
    assert alone <= len(sent) // 3, f"{alone} of {len(sent)} calls carried one add"
    assert (await standalone_queue.get_job_counts()).waiting == 2000
