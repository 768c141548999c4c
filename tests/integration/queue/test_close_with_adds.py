"""Closing a Queue with adds in flight: the adds it accepted are sent first (for at most
close's time-out), those it could not send fail with QueueClosedError and are not stored,
and calls made after close() began are refused with QueueClosedError. Coalesced add calls
in flight are bounded (at most 8 at once), however many adds are made together."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import glidemq.queue.queue as queue_module
from glidemq import ConnectionError, ConnectionOptions, Queue, QueueClosedError


async def test_close_sends_the_adds_it_accepted(conn: ConnectionOptions, queue_name: str) -> None:
    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    await queue.add("warm", {})
    adds = [asyncio.ensure_future(queue.add("x", {"i": i})) for i in range(2000)]
    await asyncio.sleep(0)  # every add has started: each one is accepted
    await queue.close()
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert [r for r in results if isinstance(r, BaseException)] == []
    async with Queue(queue_name, connection=conn) as check:
        assert (await check.get_job_counts()).waiting == 2001
        await check.obliterate(force=True)
    with pytest.raises(QueueClosedError, match="is closed"):
        await queue.add("late", {})
    await queue.close()  # idempotent


async def test_adds_close_could_not_send_in_time_fail_clearly_and_are_not_stored(
    conn: ConnectionOptions, queue_name: str
) -> None:
    queue: Queue[Any, Any] = Queue(queue_name, connection=conn)
    await queue.add("warm", {}, {"job_id": "warm"})
    n = 12_000  # 12 calls of 1,000: 8 go out at once, the others wait their turn
    adds = [asyncio.ensure_future(queue.add("x", {"i": i}, {"job_id": f"j{i}"})) for i in range(n)]
    await asyncio.sleep(0)
    await queue.close(timeout=0)  # no time to wait: what is not on its way fails
    results = await asyncio.gather(*adds, return_exceptions=True)
    closed = [i for i, r in enumerate(results) if isinstance(r, QueueClosedError)]
    sent = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    unclear = [i for i, r in enumerate(results) if isinstance(r, ConnectionError)]
    others = [r for r in results if isinstance(r, BaseException)]
    assert len(closed) + len(sent) + len(unclear) == n, {type(r) for r in others}
    assert closed, "some adds had not gone out yet"
    async with Queue(queue_name, connection=conn) as check:
        for i in closed:  # refused: nothing of it was written
            assert await check.get_job(f"j{i}") is None
        for i in sent:  # answered: stored
            assert await check.get_job(f"j{i}") is not None
        await check.obliterate(force=True)


async def test_coalesced_add_calls_in_flight_are_bounded(
    standalone_conn: ConnectionOptions, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_send = queue_module.send
    now = [0]
    most = [0]

    async def counting_send(sender: Any, call: Any) -> Any:
        if call.function != "glidemq_addBulk":
            return await real_send(sender, call)
        now[0] += 1
        most[0] = max(most[0], now[0])
        try:
            return await real_send(sender, call)
        finally:
            now[0] -= 1

    monkeypatch.setattr(queue_module, "send", counting_send)
    async with Queue(queue_name, connection=standalone_conn) as queue:
        await queue.add("warm", {})
        jobs = await asyncio.gather(*(queue.add("x", {"i": i}) for i in range(30_000)))
        assert all(j is not None for j in jobs)
        assert (await queue.get_job_counts()).waiting == 30_001
        await queue.obliterate(force=True)
    # 30,000 adds made together are 30 calls of 1,000: at most 8 of them out at once
    assert 1 < most[0] <= 8


async def test_an_add_answered_while_close_runs_returns_its_job(
    standalone_conn: ConnectionOptions, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue: Queue[Any, Any] = Queue(queue_name, connection=standalone_conn)
    await queue.add("warm", {})
    real_send, real_close_client = queue_module.send, queue_module.close_client
    stored, dropped = asyncio.Event(), asyncio.Event()
    out = [0]

    async def answered_after_close_began(sender: Any, call: Any) -> Any:
        out[0] += 1
        reply = await real_send(sender, call)
        out[0] -= 1
        if not out[0]:  # every call made was answered by the server
            stored.set()
        await dropped.wait()  # each reply is read once close() dropped the connection
        return reply

    async def dropping(client: Any) -> None:
        dropped.set()
        await real_close_client(client)

    monkeypatch.setattr(queue_module, "send", answered_after_close_began)
    monkeypatch.setattr(queue_module, "close_client", dropping)
    adds = [asyncio.ensure_future(queue.add("x", {"i": i})) for i in range(10)]
    await stored.wait()
    await queue.close(timeout=0)
    results = await asyncio.gather(*adds, return_exceptions=True)
    assert all(not isinstance(r, BaseException) and r is not None for r in results), results
    async with Queue(queue_name, connection=standalone_conn) as check:
        assert (await check.get_job_counts()).waiting == 11
        await check.obliterate(force=True)
