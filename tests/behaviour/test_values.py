"""Values glidemq stores: NaN and Infinity are refused in data, progress and results (JSON has
no such numbers; orjson would write null); a result larger than the worker's
max_result_bytes fails the try; events carry a return value only up to 16 KiB."""

from __future__ import annotations

import math
from typing import Any

import pytest

from glidemq import BatchOptions, PayloadTooLargeError, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state

EVENT_VALUE_MAX_BYTES = 16_384  # the bound documented for event values

NON_FINITE: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    {"v": math.nan},
    {"a": [1, 2, {"b": [math.inf]}]},
    [None, (1.0, -math.inf)],
]


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
async def test_nan_and_infinity_in_data_are_refused_and_nothing_is_added(
    backend: Backend, value: Any
) -> None:
    with pytest.raises(ValidationError, match="NaN or Infinity"):
        await backend.queue.add("x", value)
    with pytest.raises(ValidationError, match="NaN or Infinity"):
        await backend.queue.add_bulk([("ok", {"v": 1}), ("bad", value)])
    counts = await backend.queue.get_job_counts()
    assert counts.waiting == 0, counts
    # null written on purpose is still fine
    job = await backend.queue.add("null", {"v": None, "w": 1.5})
    assert job is not None
    with pytest.raises(ValidationError, match="NaN or Infinity"):
        await job.update_data(value)
    stored = await backend.queue.get_job(job.id)
    assert stored is not None and stored.data == {"v": None, "w": 1.5}


@pytest.mark.parametrize("value", NON_FINITE[:4], ids=repr)
async def test_processor_returning_nan_or_infinity_fails_the_try(
    backend: Backend, value: Any
) -> None:
    async def returns(job: Any) -> Any:
        return value if job.name == "bad" else {"fine": None}

    bad = await backend.queue.add("bad", None)
    good = await backend.queue.add("good", None)
    assert bad is not None and good is not None
    async with backend.worker(returns):
        failed = await wait_state(backend.queue, bad.id, "failed")
        done = await wait_state(backend.queue, good.id, "completed")
    assert failed.failed_reason == (
        "returnvalue: contains NaN or Infinity, which JSON cannot represent"
    )
    assert failed.returnvalue is None
    assert done.returnvalue == {"fine": None}


async def test_progress_with_nan_or_over_the_event_bound_is_refused(backend: Backend) -> None:
    seen: list[str] = []

    async def progress(job: Any) -> str:
        for value in ({"p": math.nan}, math.inf):
            try:
                await job.update_progress(value)
            except ValidationError as exc:
                seen.append(exc.field)
        try:
            await job.update_progress({"blob": "x" * EVENT_VALUE_MAX_BYTES})
        except PayloadTooLargeError as exc:
            seen.append(f"{exc.field} {exc.limit}")
        await job.update_progress(50)
        return "ok"

    job = await backend.queue.add("p", None)
    assert job is not None
    async with backend.worker(progress):
        done = await wait_state(backend.queue, job.id, "completed")
    assert seen == ["progress", "progress", f"progress {EVENT_VALUE_MAX_BYTES}"]
    assert done.progress == 50


async def test_result_over_max_result_bytes_fails_the_try_with_its_size(backend: Backend) -> None:
    async def sized(job: Any) -> str:
        return "x" * int(job.data)

    small = await backend.queue.add("s", 998)  # 1000 bytes with the quotes
    big = await backend.queue.add("b", 999)
    assert small is not None and big is not None
    async with backend.worker(sized, max_result_bytes=1000):
        done = await wait_state(backend.queue, small.id, "completed")
        failed = await wait_state(backend.queue, big.id, "failed")
    assert done.returnvalue == "x" * 998
    reason = "returnvalue: serialized payload is 1001 bytes, the limit is 1000"
    assert failed.failed_reason == reason
    with pytest.raises(ValidationError, match="max_result_bytes"):
        backend.worker(sized, max_result_bytes=0)


async def test_default_result_limit_is_one_mib(backend: Backend) -> None:
    async def huge(job: Any) -> str:
        return "x" * (1 << 20)

    job = await backend.queue.add("h", None)
    assert job is not None
    async with backend.worker(huge):
        failed = await wait_state(backend.queue, job.id, "failed")
    assert failed.failed_reason == (
        f"returnvalue: serialized payload is {(1 << 20) + 2} bytes, the limit is {1 << 20}"
    )


async def test_batch_item_with_nan_or_too_large_fails_alone(backend: Backend) -> None:
    async def batch(jobs: list[Any]) -> list[Any]:
        return [{"nan": math.nan} if j.name == "nan" else "y" * int(j.data) for j in jobs]

    nan = await backend.queue.add("nan", 1)
    big = await backend.queue.add("big", 200)
    ok = await backend.queue.add("ok", 10)
    assert nan is not None and big is not None and ok is not None
    opts = BatchOptions(size=3, timeout_ms=50)
    async with backend.worker(batch, batch=opts, max_result_bytes=100):
        assert (await wait_state(backend.queue, ok.id, "completed")).returnvalue == "y" * 10
        f1 = await wait_state(backend.queue, nan.id, "failed")
        f2 = await wait_state(backend.queue, big.id, "failed")
    assert "NaN or Infinity" in (f1.failed_reason or "")
    assert f2.failed_reason == "returnvalue: serialized payload is 202 bytes, the limit is 100"


async def test_completed_event_carries_the_return_value_only_when_small(
    backend: Backend,
) -> None:
    async def sized(job: Any) -> str:
        return "z" * int(job.data)

    events: list[Any] = []
    reader = backend.queue_events()
    reader.on("completed", events.append)
    await reader.start()
    small = await backend.queue.add("s", 10)
    large = await backend.queue.add("l", EVENT_VALUE_MAX_BYTES)  # + 2 quotes: over the bound
    assert small is not None and large is not None
    async with backend.worker(sized):
        await wait_state(backend.queue, large.id, "completed")
        await wait_state(backend.queue, small.id, "completed")
        await wait_for(lambda: len(events) == 2, timeout=10)
    by_id = {e.job_id: e.fields for e in events}
    assert by_id[small.id]["returnvalue"] == '"' + "z" * 10 + '"'
    assert "returnvalue" not in by_id[large.id]
    assert by_id[large.id]["returnvalueBytes"] == str(EVENT_VALUE_MAX_BYTES + 2)
    stored = await backend.queue.get_job(large.id)
    assert stored is not None and stored.returnvalue == "z" * EVENT_VALUE_MAX_BYTES


async def test_add_and_wait_returns_a_result_too_large_for_its_event(backend: Backend) -> None:
    async def sized(job: Any) -> str:
        return "q" * int(job.data)

    async with backend.worker(sized):
        value = await backend.queue.add_and_wait("w", EVENT_VALUE_MAX_BYTES * 2, timeout=30)
    assert value == "q" * EVENT_VALUE_MAX_BYTES * 2
