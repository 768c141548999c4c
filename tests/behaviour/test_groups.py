"""Groups at run time and fair scheduling across groups, on all three engines: a small tenant
behind a big one's backlog, weights, pausing one group, changing its limits for running
workers, the group getters and a group's maximum size."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from glidemq import (
    BatchOptions,
    GroupFullError,
    JobOptions,
    QueueFullError,
    RateLimit,
    ValidationError,
)
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for


def _fair(key: str, weight: int = 1, **more: Any) -> JobOptions:
    return JobOptions(group_key=key, group_weight=weight, **more)


async def test_a_small_tenant_is_served_in_turn_behind_a_big_backlog(backend: Backend) -> None:
    order: list[str] = []

    async def run(job: Any) -> None:
        order.append(job.data)

    await backend.queue.add_bulk([("j", "big", _fair("big")) for _ in range(2000)])
    await backend.queue.add_bulk([("j", "small", _fair("small")) for _ in range(10)])
    async with backend.worker(run, concurrency=1):
        await wait_for(lambda: order.count("small") == 10, timeout=60)
    first = order[:40]
    assert first.count("small") == 10, f"small tenant's jobs at {order.index('small')}.."


async def test_without_fairness_the_backlog_runs_first(backend: Backend) -> None:
    # the control of the test above: groups without a weight are served in add order
    order: list[str] = []

    async def run(job: Any) -> None:
        order.append(job.data)

    opts = {"group_concurrency": 1000}
    await backend.queue.add_bulk([("j", "big", {"group_key": "big", **opts})] * 200)
    await backend.queue.add_bulk([("j", "small", {"group_key": "small", **opts})] * 5)
    async with backend.worker(run, concurrency=1):
        await wait_for(lambda: len(order) == 205, timeout=60)
    assert order.index("small") >= 200


async def test_a_weight_gives_a_group_that_share_of_the_turns(backend: Backend) -> None:
    order: list[str] = []

    async def run(job: Any) -> None:
        order.append(job.data)

    await backend.queue.add_bulk([("j", "heavy", _fair("heavy", 3)) for _ in range(300)])
    await backend.queue.add_bulk([("j", "light", _fair("light", 1)) for _ in range(300)])
    async with backend.worker(run, concurrency=1):
        await wait_for(lambda: len(order) >= 200, timeout=60)
    window = order[20:200]
    share = window.count("heavy") / len(window)
    assert 0.65 <= share <= 0.85, f"heavy got {share:.2f} of the turns, expected about 0.75"


async def test_a_fair_group_without_concurrency_runs_its_jobs_side_by_side(
    backend: Backend,
) -> None:
    running, peak = 0, 0
    release = asyncio.Event()

    async def run(job: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    await backend.queue.add_bulk([("j", i, _fair("t", 4)) for i in range(8)])
    async with backend.worker(run, concurrency=8):
        await wait_for(lambda: peak >= 4, timeout=10)
        release.set()
        await wait_for(lambda: running == 0 and peak >= 4, timeout=10)
    assert peak >= 4


async def test_a_paused_group_starts_nothing_while_the_others_go_on(backend: Backend) -> None:
    done: list[str] = []

    async def run(job: Any) -> None:
        done.append(job.data)

    queue = backend.queue
    await queue.pause_group("a")
    await queue.add_bulk([("j", "a", {"group_key": "a", "group_concurrency": 2})] * 3)
    await queue.add_bulk([("j", "f", _fair("f"))] * 3)
    await queue.pause_group("f")
    await queue.add_bulk([("j", "b", {"group_key": "b", "group_concurrency": 2})] * 3)
    await queue.add_bulk([("j", "o", {"ordering_key": "o"})] * 2)
    await queue.pause_group("o")
    async with backend.worker(run, concurrency=4):
        await wait_for(lambda: done.count("b") == 3, timeout=10)
        await backend.elapse(300)
        assert "a" not in done and "f" not in done and "o" not in done
        info = await queue.get_group("a")
        assert info is not None and info.paused and info.waiting == 3
        for key in ("a", "f", "o"):
            await queue.resume_group(key)
        await wait_for(lambda: len(done) == 11, timeout=10)
    assert done.count("a") == 3 and done.count("f") == 3 and done.count("o") == 2
    assert not (await queue.get_group("a")).paused  # type: ignore[union-attr]


async def test_a_concurrency_set_at_run_time_applies_to_running_workers(
    backend: Backend,
) -> None:
    running, peak = 0, 0
    gate = asyncio.Event()

    async def run(job: Any) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1

    queue = backend.queue
    opts = {"group_key": "g", "group_concurrency": 1000}
    await queue.set_group_concurrency("g", 2)
    async with backend.worker(run, concurrency=10):
        await queue.add_bulk([("j", i, opts) for i in range(6)])  # the adds say 1000
        await wait_for(lambda: running == 2, timeout=10)
        await backend.elapse(200)
        assert peak == 2
        await queue.set_group_concurrency("g", 5)
        await wait_for(lambda: running == 5, timeout=10)
        gate.set()
        await wait_for(lambda: running == 0, timeout=10)
    info = await queue.get_group("g")
    assert info is not None and info.concurrency == 5 and peak == 5
    with pytest.raises(ValidationError):
        await queue.set_group_concurrency("g", 0)


async def test_a_lowered_concurrency_holds_for_slots_handed_out_before_it(
    backend: Backend,
) -> None:
    """Slots freed under the old limit went to parked jobs as reservations; once the limit is
    lowered, those jobs start within the new limit too, not all at once."""
    started: list[int] = []
    done: list[int] = []
    gates = [asyncio.Event() for _ in range(8)]
    peak = 0

    async def run(job: Any) -> None:
        nonlocal peak
        started.append(job.data)
        peak = max(peak, len(started) - len(done))
        await gates[job.data].wait()
        done.append(job.data)

    async def never(job: Any) -> None:
        raise AssertionError("the group's jobs park while it is full")

    queue = backend.queue
    await queue.set_group_concurrency("g", 4)
    opts = {"group_key": "g", "group_concurrency": 1000}
    await queue.add_bulk([("j", i, opts) for i in range(8)])
    worker = backend.worker(run, concurrency=4)
    async with worker:
        await wait_for(lambda: len(started) == 4, timeout=10)
        async with backend.worker(never, concurrency=1):  # reads the other four: they park

            async def parked() -> bool:
                info = await queue.get_group("g")
                return info is not None and info.parked == 4

            await wait_for(parked, timeout=10)
        worker.pause()  # its slots are full: no read is in flight, and none is sent
        for i in list(started):
            gates[i].set()
        await wait_for(lambda: len(done) == 4, timeout=10)
        info = await queue.get_group("g")
        assert info is not None and info.active == 4, "the freed slots were not handed on"
        await queue.set_group_concurrency("g", 1)
        peak = 0
        worker.resume()
        await wait_for(lambda: len(started) >= 5, timeout=10)
        await backend.elapse(300)
        assert peak == 1, f"{peak} jobs ran at once after the limit went down to 1"
        for gate in gates:
            gate.set()
        await wait_for(lambda: len(done) == 8, timeout=10)
    assert peak == 1, f"{peak} jobs ran at once after the limit went down to 1"
    info = await queue.get_group("g")
    assert info is not None and info.active == 0 and info.waiting == 0


async def test_an_ordering_key_refuses_a_concurrency(backend: Backend) -> None:
    await backend.queue.add("j", 1, {"ordering_key": "k"})
    with pytest.raises(ValidationError, match="ordering key"):
        await backend.queue.set_group_concurrency("k", 3)


async def test_a_rate_limit_set_at_run_time_holds_back_a_groups_starts(
    backend: Backend,
) -> None:
    done: list[int] = []

    async def run(job: Any) -> None:
        done.append(job.data)

    queue = backend.queue
    await queue.set_group_rate_limit("r", RateLimit(2, 3000))
    async with backend.worker(run, concurrency=5):
        await queue.add_bulk(
            [("j", i, {"group_key": "r", "group_concurrency": 5}) for i in range(5)]
        )
        await wait_for(lambda: len(done) == 2, timeout=10)
        await backend.elapse(300)
        assert len(done) == 2
        info = await queue.get_group("r")
        assert info is not None and info.rate_limit == RateLimit(2, 3000)
        await queue.set_group_rate_limit("r", None)
        # the held-back jobs wait for their window; the promotion loop brings them back
        await backend.elapse(3100)
        await wait_for(lambda: len(done) == 5, timeout=20)
    assert (await queue.get_group("r")).rate_limit is None  # type: ignore[union-attr]


async def test_a_group_past_its_size_refuses_adds_and_the_others_go_on(
    backend: Backend,
) -> None:
    queue = backend.queue
    await queue.set_max_group_size("t", 2)
    await queue.add_bulk([("j", i, {"group_key": "t", "group_concurrency": 2}) for i in range(2)])
    with pytest.raises(GroupFullError) as info:
        await queue.add("j", 3, {"group_key": "t", "group_concurrency": 2})
    assert info.value.group == "t" and isinstance(info.value, QueueFullError)
    await queue.add("j", 4, {"group_key": "other", "group_concurrency": 2})
    await queue.set_max_group_size("t", None)
    await queue.add("j", 5, {"group_key": "t", "group_concurrency": 2})
    assert (await queue.get_group_counts("t"))["waiting"] == 3


async def test_the_getters_list_groups_their_counts_and_jobs(backend: Backend) -> None:
    queue = backend.queue
    await queue.add_bulk([("j", i, _fair("f", 2)) for i in range(5)])
    await queue.add("j", 9, {"ordering_key": "o"})
    await queue.add("j", 8, {"group_key": "c", "group_concurrency": 3})
    groups = {g.key: g for g in await queue.get_groups()}
    assert set(groups) == {"f", "o", "c"}
    f = groups["f"]
    assert (f.weight, f.concurrency, f.waiting, f.parked) == (2, None, 5, 3)
    assert groups["o"].ordering and groups["o"].concurrency == 1 and groups["o"].active is None
    assert groups["c"].concurrency == 3 and groups["c"].weight is None
    assert await queue.get_group_counts("f") == {"waiting": 5, "parked": 3, "active": 0}
    parked = await queue.get_group_jobs("f", "group-waiting")
    assert [j.data for j in parked] == [2, 3, 4]
    waiting = await queue.get_group_jobs("f", "waiting")
    assert sorted(j.data for j in waiting) == [0, 1]
    assert await queue.get_group("nope") is None
    with pytest.raises(ValidationError):
        await queue.pause_group("")


async def test_removing_a_fair_groups_job_hands_its_turn_on(backend: Backend) -> None:
    queue = backend.queue
    jobs = await queue.add_bulk([("j", i, _fair("f")) for i in range(3)])
    await queue.remove(jobs[0].id)  # the one in the stream: the next one takes its place
    done: list[int] = []

    async def run(job: Any) -> None:
        done.append(job.data)

    async with backend.worker(run, concurrency=2):
        await wait_for(lambda: len(done) == 2, timeout=10)
    assert sorted(done) == [1, 2]
    assert (await queue.get_group_counts("f"))["waiting"] == 0


async def test_a_weight_needs_a_group_that_runs_jobs_side_by_side() -> None:
    with pytest.raises(ValidationError, match="group_weight"):
        JobOptions(ordering_key="k", group_weight=2)
    with pytest.raises(ValidationError, match="group_weight"):
        JobOptions(group_key="k", group_concurrency=1, group_weight=2)
    with pytest.raises(ValidationError, match="group_weight"):
        JobOptions(group_weight=2)
    with pytest.raises(ValidationError, match="group_weight"):
        JobOptions(group_key="k", group_weight=0)


async def test_a_batch_by_group_holds_jobs_of_one_group_only(backend: Backend) -> None:
    batches: list[list[str | None]] = []

    async def run(jobs: list[Any]) -> list[None]:
        batches.append([j.group_key for j in jobs])
        return [None] * len(jobs)

    items: list[tuple[str, int, Any]] = []
    for i in range(6):
        items.append(("j", i, {"group_key": "a", "group_concurrency": 100}))
        items.append(("j", i, {"group_key": "b", "group_concurrency": 100}))
        if i % 2:
            items.append(("j", i, None))
    await backend.queue.add_bulk(items)
    batch = BatchOptions(size=4, timeout_ms=50, group=True)
    async with backend.worker(run, concurrency=4, batch=batch):
        await wait_for(lambda: sum(len(b) for b in batches) == 15, timeout=20)
    assert all(len(set(b)) == 1 for b in batches), batches
    assert all(len(b) <= 4 for b in batches)
    assert {b[0] for b in batches} == {"a", "b", None}


async def test_a_batch_starts_once_it_has_min_size_jobs(backend: Backend) -> None:
    sizes: list[int] = []

    async def run(jobs: list[Any]) -> list[None]:
        sizes.append(len(jobs))
        return [None] * len(jobs)

    # a timeout far beyond the test's wait: the batch starts because it reached min_size
    batch = BatchOptions(size=10, min_size=3, timeout_ms=60_000)
    async with backend.worker(run, concurrency=10, batch=batch):
        await backend.queue.add_bulk([("j", i) for i in range(3)])
        await wait_for(lambda: sizes == [3], timeout=10)


def test_batch_options_check_min_size_and_group() -> None:
    with pytest.raises(ValidationError, match="min_size"):
        BatchOptions(size=4, min_size=5)
    with pytest.raises(ValidationError, match="min_size"):
        BatchOptions(size=4, min_size=0)
    with pytest.raises(ValidationError, match="group"):
        BatchOptions(group="yes")  # type: ignore[arg-type]
