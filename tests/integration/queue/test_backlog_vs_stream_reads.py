"""What docs/DEPLOY.md says about KEDA's Redis Streams scaler, checked on a real Valkey: the
three numbers it can read of a stream (XLEN, the group's pending count, the group's lag from
XINFO GROUPS) miss jobs of glidemq's layout that `Queue.get_backlog` counts: delayed jobs that
are due, prioritized, LIFO and group-parked jobs live outside the stream, the group does not
exist before the first worker, and the lag cannot be computed once an undelivered entry was
deleted (a removed job)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import valkey

from glidemq import JobOptions, Queue, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for


@pytest.fixture
def raw(valkey_server: ValkeyAddress) -> Iterator[valkey.Valkey]:
    client = valkey.Valkey(host=valkey_server.host, port=valkey_server.port)
    yield client
    client.close()


def _group(raw: valkey.Valkey, stream: str) -> dict[str, Any] | None:
    groups = raw.xinfo_groups(stream) if raw.exists(stream) else []
    return groups[0] if groups else None


async def test_the_stream_numbers_miss_what_the_backlog_counts(
    valkey_server: ValkeyAddress, raw: valkey.Valkey, queue_name: str
) -> None:
    stream = f"glide:{{{queue_name}}}:stream"
    async with Queue(queue_name, connection=valkey_server.url) as q:
        await q.add_bulk([("j", i, None) for i in range(5)])
        await q.add_bulk([("p", i, {"priority": 2}) for i in range(2)])
        await q.add_bulk([("d", i, {"delay": 50}) for i in range(3)])
        await q.add("l", None, {"lifo": True})
        fair = JobOptions(group_key="t", group_weight=1)
        await q.add_bulk([("g", i, fair) for i in range(3)])  # one in the stream, two parked

        async def due() -> bool:
            return (await q.get_backlog()).due == 3

        await wait_for(due, timeout=10)
        b = await q.get_backlog()
        assert (b.waiting, b.prioritized, b.due, b.grouped, b.to_start) == (7, 2, 3, 2, 14)
        # no worker ever ran: no consumer group, so no pending count and no lag at all
        assert raw.xlen(stream) == 6 and _group(raw, stream) is None

        gate = asyncio.Event()

        async def hold(job: Any) -> None:
            await gate.wait()

        worker = Worker(queue_name, hold, connection=valkey_server.url, concurrency=2,
                        hold_window=0, **FAST)  # fmt: skip
        async with worker:

            async def two_running() -> bool:
                b = await q.get_backlog()
                return b.active == 2 and b.due == 0

            await wait_for(two_running, timeout=10)
            b = await q.get_backlog()
            group = _group(raw, stream)
            assert group is not None and group["pending"] == 2
            # the lag sees the stream's undelivered entries only: not the LIFO job, the
            # prioritized ones nor the parked ones
            assert group["lag"] == b.waiting - 1 < b.to_start
            assert raw.xlen(stream) == group["lag"] + 2
            assert (b.prioritized, b.grouped) == (2, 2)
            waiting = await q.get_jobs("waiting", 0, 0)
            await q.remove(waiting[0].id)
            group = _group(raw, stream)
            assert group is not None and group["lag"] is None  # Valkey cannot tell any more
            assert (await q.get_backlog()).to_start == b.to_start - 1
            gate.set()
