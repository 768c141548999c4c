"""Bad input at every public entry point gets a clear, typed error and writes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    GlideMQError,
    Job,
    PayloadTooLargeError,
    Queue,
    QueueEvents,
    ValidationError,
    Worker,
    WorkerOptions,
)
from glidemq.encoding.serialize import MAX_PAYLOAD_BYTES
from tests.helpers import wait_for

BAD_QUEUE_NAMES = ["", "a{b", "b}", "{x}", "a:b", "x" * 201, "sp ace", "ctl\x01", None, 7]


async def noop(job: Job[Any, Any]) -> None:
    return None


def check_validation(exc: BaseException, field: str) -> None:
    assert isinstance(exc, ValidationError), repr(exc)
    assert isinstance(exc, GlideMQError)
    assert exc.field == field, f"{exc.field!r} != {field!r}: {exc}"


async def expect_invalid(
    field: str, call: Callable[[], Awaitable[Any]], *, match: str | None = None
) -> ValidationError:
    with pytest.raises(ValidationError, match=match) as info:
        await call()
    check_validation(info.value, field)
    return info.value


async def assert_nothing_written(queue: Queue[Any, Any], id_counter: bytes | None = None) -> None:
    counts = await queue.get_job_counts()
    assert counts.as_dict() == dict.fromkeys(counts.as_dict(), 0)
    client = (await queue._context()).client
    assert await client.get(queue.keys.id) == id_counter
    assert await client.exists([queue.keys.events]) == 0


# =========================================================================== names & constructors


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES)
def test_bad_queue_name_is_rejected_by_every_constructor(name: Any) -> None:
    constructors: list[Callable[[], Any]] = [
        lambda: Queue(name, connection="valkey://127.0.0.1:1"),
        lambda: Worker(name, noop, connection="valkey://127.0.0.1:1"),
        lambda: QueueEvents(name, connection="valkey://127.0.0.1:1"),
    ]
    for make in constructors:
        with pytest.raises(ValidationError) as info:
            make()
        check_validation(info.value, "queue")


def test_longest_queue_name_is_accepted() -> None:
    assert Queue("q" * 200, connection="valkey://127.0.0.1:1").name == "q" * 200


@pytest.mark.parametrize("prefix", ["", "a:b", "{p}", "with space"])
def test_bad_prefix_is_rejected(prefix: str) -> None:
    with pytest.raises(ValidationError) as info:
        Queue("ok", prefix=prefix, connection="valkey://127.0.0.1:1")
    check_validation(info.value, "prefix")


@pytest.mark.parametrize(
    ("connection", "field"),
    [
        (42, "connection"),
        (b"valkey://h", "connection"),
        ("http://h:1", "url"),
        ("valkey://h:x", "url"),
    ],
)
def test_bad_connection_is_rejected(connection: Any, field: str) -> None:
    for make in (Queue, QueueEvents):
        with pytest.raises(ValidationError) as info:
            make("ok", connection=connection)
        check_validation(info.value, field)
    with pytest.raises(ValidationError) as winfo:
        Worker("ok", noop, connection=connection)
    check_validation(winfo.value, field)


@pytest.mark.parametrize("processor", [None, "module:function", 42, {"run": noop}])
def test_non_callable_processor_is_rejected(processor: Any) -> None:
    with pytest.raises(ValidationError) as info:
        Worker("ok", processor, connection="valkey://127.0.0.1:1")
    check_validation(info.value, "processor")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": "8"}, "concurrency"),
        ({"prefetch": -1}, "prefetch"),
        ({"block_timeout": 0}, "block_timeout"),
        ({"lock_duration": 10}, "lock_duration"),
        ({"remove_on_fail": -5}, "remove_on_fail"),
    ],
)
def test_bad_worker_settings_are_rejected(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        Worker("ok", noop, connection="valkey://127.0.0.1:1", **settings)
    check_validation(info.value, field)


def test_unknown_worker_keyword_is_rejected_with_a_hint() -> None:
    with pytest.raises(ValidationError, match="did you mean 'concurrency'") as info:
        Worker("ok", noop, connection="valkey://127.0.0.1:1", concurency=5)
    check_validation(info.value, "concurency")
    with pytest.raises(ValidationError) as info2:
        Worker("ok", noop, connection="valkey://127.0.0.1:1", options=WorkerOptions(), nope=1)
    check_validation(info2.value, "nope")


def test_bad_settings_override_options_and_are_still_checked() -> None:
    with pytest.raises(ValidationError) as info:
        Worker(
            "ok",
            noop,
            connection="valkey://127.0.0.1:1",
            options=WorkerOptions(concurrency=4),
            concurrency=0,
        )
    check_validation(info.value, "concurrency")


# =========================================================================== adding jobs


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"delay": -1}, "delay"),
        ({"priority": 2048}, "priority"),
        ({"priority": -1}, "priority"),
        ({"attempts": 0}, "attempts"),
        ({"timeout": 0}, "timeout"),
        ({"ttl": -10}, "ttl"),
        ({"backoff": {"type": "", "delay": 10}}, "backoff.type"),
        ({"backoff": {"type": 5}}, "backoff.type"),
        ({"backoff": {"type": "fixed", "jitter": 2}}, "backoff.jitter"),
        ({"backoff": {"type": "fixed", "delay": -1}}, "backoff.delay"),
        ({"backoff": {"kind": "fixed"}}, "backoff.kind"),
        ({"deduplication": {"id": "d", "mode": "weird"}}, "deduplication.mode"),
        ({"remove_on_complete": "yes"}, "remove_on_complete"),
        ({"job_id": "x" * 257}, "job_id"),
        ({"job_id": "a{b"}, "job_id"),
        ({"job_id": "a}b"}, "job_id"),
        ({"job_id": "a:b"}, "job_id"),
        ({"job_id": "tab\there"}, "job_id"),
        ({"job_id": "nul\x00"}, "job_id"),
        ({"job_id": "del\x7f"}, "job_id"),
        ({"job_id": ""}, "job_id"),
    ],
)
async def test_bad_job_options_are_rejected_before_any_write(
    queue: Queue[Any, Any], opts: dict[str, Any], field: str
) -> None:
    await expect_invalid(field, lambda: queue.add("job", {"x": 1}, opts))
    await assert_nothing_written(queue)


async def test_unknown_job_option_names_a_close_match(queue: Queue[Any, Any]) -> None:
    err = await expect_invalid("dealy", lambda: queue.add("job", 1, {"dealy": 500}))
    assert "did you mean 'delay'" in str(err)
    err = await expect_invalid("atempts", lambda: queue.add("job", 1, {"atempts": 3}))
    assert "did you mean 'attempts'" in str(err)
    await assert_nothing_written(queue)


@pytest.mark.parametrize("opts", [5, "delay=5", ["delay", 5]])
async def test_opts_of_the_wrong_type_are_rejected(queue: Queue[Any, Any], opts: Any) -> None:
    await expect_invalid("opts", lambda: queue.add("job", 1, opts))
    await assert_nothing_written(queue)


@pytest.mark.parametrize("name", [None, 5, b"bytes"])
async def test_job_name_must_be_a_string(queue: Queue[Any, Any], name: Any) -> None:
    await expect_invalid("name", lambda: queue.add(name, 1))
    await assert_nothing_written(queue)


async def test_custom_job_id_of_256_characters_is_accepted(queue: Queue[Any, Any]) -> None:
    long_id = "i" * 256
    job = await queue.add("job", 1, {"job_id": long_id})
    assert job is not None and job.id == long_id
    stored = await queue.get_job(long_id)
    assert stored is not None and stored.data == 1


@pytest.mark.parametrize(
    "data", [{1, 2}, {"when": object()}, {"blob": b"\x00\x01"}, 2**70, [1, {"f": print}]]
)
async def test_non_json_data_is_rejected_and_nothing_written(
    queue: Queue[Any, Any], data: Any
) -> None:
    await expect_invalid("data", lambda: queue.add("job", data), match="JSON")
    await assert_nothing_written(queue)


@pytest.mark.parametrize("compression", [False, True])
async def test_payload_over_one_mib_is_refused_before_any_write(
    conn: ConnectionOptions, queue_name: str, compression: bool
) -> None:
    async with Queue(queue_name, connection=conn, compression=compression) as queue:
        try:
            first = await queue.add("small", {"ok": True})
            assert first is not None
            huge = "a" * MAX_PAYLOAD_BYTES  # compresses to almost nothing, still too big
            with pytest.raises(PayloadTooLargeError) as info:
                await queue.add("huge", huge)
            assert isinstance(info.value, GlideMQError)
            assert info.value.field == "data"
            assert info.value.size == MAX_PAYLOAD_BYTES + 2
            assert info.value.limit == MAX_PAYLOAD_BYTES
            client = (await queue._context()).client
            assert await client.get(queue.keys.id) == b"1"  # the id counter did not move
            counts = await queue.get_job_counts()
            assert counts.waiting == 1
            assert [j.id for j in await queue.get_jobs("waiting")] == [first.id]
        finally:
            await queue.obliterate(force=True)


async def test_payload_at_the_limit_is_accepted(queue: Queue[Any, Any]) -> None:
    data = "b" * (MAX_PAYLOAD_BYTES - 2)  # exactly 1 MiB once JSON-encoded
    job = await queue.add("edge", data)
    assert job is not None
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.data == data


async def test_add_bulk_rejects_the_whole_batch_for_one_bad_item(queue: Queue[Any, Any]) -> None:
    items: list[Any] = [("ok", i) for i in range(10)]
    items[3] = ("too-big", "c" * MAX_PAYLOAD_BYTES)
    with pytest.raises(PayloadTooLargeError) as info:
        await queue.add_bulk(items)
    check_validation(info.value, "jobs[3].data")
    items[3] = ("bad-id", 1, {"job_id": "x:y"})
    await expect_invalid("jobs[3].job_id", lambda: queue.add_bulk(items))
    await assert_nothing_written(queue)


# =========================================================================== reading & admin


@pytest.mark.parametrize("state", ["running", "WAITING", "", "dlq"])
async def test_get_jobs_unknown_state(queue: Queue[Any, Any], state: str) -> None:
    await expect_invalid("states", lambda: queue.get_jobs(state))
    await expect_invalid("states", lambda: queue.get_jobs(["waiting", state]))


@pytest.mark.parametrize("state", ["active", "running", "dlq", ""])
async def test_clean_bad_state(queue: Queue[Any, Any], state: str) -> None:
    await expect_invalid("state", lambda: queue.clean(0, 10, state))


@pytest.mark.parametrize(
    ("grace", "limit", "field"),
    [
        (-1, 10, "grace"),
        (0, -1, "limit"),
        (1.5, 10, "grace"),
        (True, 10, "grace"),
        (0, "9", "limit"),
    ],
)
async def test_clean_bad_numbers(
    queue: Queue[Any, Any], grace: Any, limit: Any, field: str
) -> None:
    job = await queue.add("kept", 1)
    assert job is not None
    await expect_invalid(field, lambda: queue.clean(grace, limit, "waiting"))
    assert await job.get_state() == "waiting"


async def test_retry_jobs_bad_arguments(queue: Queue[Any, Any]) -> None:
    await expect_invalid("state", lambda: queue.retry_jobs(state="waiting"))
    await expect_invalid("count", lambda: queue.retry_jobs(count=0))
    await expect_invalid("count", lambda: queue.retry_jobs(count=True))


async def test_job_methods_validate_their_arguments(queue: Queue[Any, Any]) -> None:
    job = await queue.add("j", 1, {"delay": 60_000})
    assert job is not None
    await expect_invalid("delay", lambda: job.change_delay(-5))
    await expect_invalid("priority", lambda: job.change_priority(2048))
    await expect_invalid("progress", lambda: job.update_progress("half"))
    await expect_invalid("data", lambda: job.update_data({1, 2}))
    await expect_invalid("state", lambda: job.retry(state="delayed"))
    fresh = await job.refresh()
    assert (fresh.state, fresh.priority, fresh.progress, fresh.data) == ("delayed", 0, 0, 1)


# =========================================================================== bad processor output


async def test_non_serializable_return_value_fails_the_job_clearly(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    job = await queue.add("j", 1)
    assert job is not None

    async def returns_a_set(j: Job[Any, Any]) -> Any:
        return {1, 2, 3}

    async with Worker(queue.name, returns_a_set, connection=conn) as worker:
        await wait_for(lambda: worker.failed_count == 1)
    fresh = await job.refresh()
    assert fresh.state == "failed"
    assert fresh.failed_reason is not None and "JSON-serializable" in fresh.failed_reason
    assert worker.completed_count == 0
