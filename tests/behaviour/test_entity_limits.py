"""Sliding-window rate limits and per-key depth limits, on all three engines."""

from __future__ import annotations

import time
from typing import Any

import pytest

from glidemq import QueueFullError, RateLimit, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for


async def test_no_window_of_the_limit_sees_more_than_max_starts(backend: Backend) -> None:
    # one job opens a window; nine arrive late in it. Fixed windows would start 4 then 5 more
    # right after the boundary: 9 inside one window of 1000 ms.
    starts: list[float] = []

    async def run(job: Any) -> None:
        # the processor's own clock: the manual clock in memory, monotonic otherwise
        starts.append(backend.now_ms() if backend.clock else time.monotonic() * 1000)

    async with backend.worker(run, concurrency=10, limiter=RateLimit(5, 1000)):
        await backend.queue.add("first", 0)
        await wait_for(lambda: len(starts) == 1, timeout=10)
        await backend.elapse(700)
        await backend.queue.add_bulk([("j", i) for i in range(9)])
        for _ in range(60):
            if len(starts) == 10:
                break
            await backend.elapse(100)
    assert len(starts) == 10
    s = sorted(starts)
    assert all(s[i + 5] - s[i] >= 1000 for i in range(len(s) - 5)), s
    # and the limit did not hold back more than it must: the 6th start came within a window
    # (plus the guard and a poll) of the first
    assert s[5] - s[0] <= 1000 + 500, s


async def test_a_group_rate_limit_is_a_sliding_window_too(backend: Backend) -> None:
    starts: list[float] = []
    opts = {"group_key": "tenant", "group_concurrency": 10, "group_rate_limit": RateLimit(3, 1000)}

    async def run(job: Any) -> None:
        starts.append(backend.now_ms() if backend.clock else time.monotonic() * 1000)

    async with backend.worker(run, concurrency=10):
        await backend.queue.add("first", 0, opts)
        await wait_for(lambda: len(starts) == 1, timeout=10)
        await backend.elapse(700)
        await backend.queue.add_bulk([("j", i, opts) for i in range(5)])
        for _ in range(60):
            if len(starts) == 6:
                break
            await backend.elapse(100)
    assert len(starts) == 6
    s = sorted(starts)
    # a fixed window would start 2 at 700 ms and 3 more at 1000 ms: 5 within 300 ms
    assert all(s[i + 3] - s[i] >= 1000 for i in range(len(s) - 3)), s


async def test_max_waiting_per_key_refuses_one_key_and_lets_others_go_on(
    backend: Backend,
) -> None:
    q = backend.queue
    assert await q.get_max_waiting_per_key() is None
    await q.set_max_waiting_per_key(2)
    assert await q.get_max_waiting_per_key() == 2
    await q.add("a1", 1, {"ordering_key": "acct-a"})
    await q.add("a2", 2, {"ordering_key": "acct-a"})
    with pytest.raises(QueueFullError):
        await q.add("a3", 3, {"ordering_key": "acct-a"})
    assert await q.add("b1", 1, {"ordering_key": "acct-b"}) is not None
    assert await q.add("plain", 1) is not None  # jobs without a key are not limited
    with pytest.raises(QueueFullError) as info:
        await q.add_bulk(
            [
                ("a4", 4, {"ordering_key": "acct-a"}),
                ("b2", 2, {"ordering_key": "acct-b"}),
                ("g1", 1, {"group_key": "tenant-g", "group_concurrency": 2}),
            ]
        )
    assert info.value.refused == [0]
    assert [j is not None for j in info.value.results] == [False, True, True]
    with pytest.raises(QueueFullError):
        await q.add("b3", 3, {"ordering_key": "acct-b"})

    done: list[str] = []

    async def run(job: Any) -> None:
        done.append(job.name)

    async with backend.worker(run, concurrency=4):
        await wait_for(lambda: len(done) == 6, timeout=10)
    # started jobs no longer count: the key takes two more, and refuses the third
    await q.add("a5", 5, {"ordering_key": "acct-a"})
    await q.add("a6", 6, {"ordering_key": "acct-a"})
    with pytest.raises(QueueFullError):
        await q.add("a7", 7, {"ordering_key": "acct-a"})
    with pytest.raises(ValidationError):
        await q.set_max_waiting_per_key(-1)
    await q.set_max_waiting_per_key(None)
    assert await q.add("a8", 8, {"ordering_key": "acct-a"}) is not None
