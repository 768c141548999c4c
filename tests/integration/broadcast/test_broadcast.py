"""Broadcast: every subscription gets every message, with retries of its own; workers of
one subscription share its messages; what every subscription is done with is trimmed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from glide import StreamReadGroupOptions

from glidemq import Broadcast, BroadcastWorker, ConnectionOptions, Job, Queue, ValidationError
from glidemq.broadcast.broadcast import subscription_queue
from glidemq.client.connection import close_client, create_client
from tests.helpers import FAST, wait_for


@pytest.fixture
async def bc(conn: ConnectionOptions, queue_name: str) -> AsyncIterator[Broadcast]:
    """A broadcast with a unique name; it and its subscription queues are deleted after."""
    b = Broadcast(queue_name, connection=conn)
    await b._connect()
    yield b
    try:
        for sub in await b.subscriptions():
            async with Queue(subscription_queue(b.name, sub), connection=conn) as q:
                await q.obliterate(force=True)
        await b.delete()
    finally:
        await b.close()


def _recorder(sink: list[tuple[str, Any]], fail_first: bool = False) -> Any:
    async def record(job: Job[Any, Any]) -> str:
        if fail_first and job.attempts_made == 0:
            raise RuntimeError("first try fails")
        sink.append((job.id, job.data))
        return f"seen {job.data}"

    return record


async def test_every_subscription_gets_every_message_with_its_own_retries(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    await bc.subscribe("billing")
    await bc.subscribe("audit")
    ids = [await bc.publish("order", {"n": i}) for i in range(30)]
    billing: list[tuple[str, Any]] = []
    audit: list[tuple[str, Any]] = []
    flaky = {"attempts": 3}
    async with (
        BroadcastWorker(bc.name, "billing", _recorder(billing), connection=conn, **FAST),
        BroadcastWorker(
            bc.name,
            "audit",
            _recorder(audit, fail_first=True),
            connection=conn,
            job_options=flaky,
            concurrency=5,
            **FAST,
        ),
    ):
        await wait_for(lambda: len(billing) == 30 and len(audit) == 30)
    expected = sorted((ids[i], {"n": i}) for i in range(30))
    assert sorted(billing) == sorted(audit) == expected
    async with (
        Queue(subscription_queue(bc.name, "billing"), connection=conn) as qb,
        Queue(subscription_queue(bc.name, "audit"), connection=conn) as qa,
    ):
        jb, ja = await qb.get_job(ids[3]), await qa.get_job(ids[3])
        assert jb is not None and jb.state == "completed" and jb.attempts_made == 0
        assert ja is not None and ja.state == "completed" and ja.attempts_made == 1
        assert ja.returnvalue == "seen {'n': 3}"
    # both subscriptions are done with every message: it can all go
    await bc.trim()
    assert await bc.length() == 0


async def test_workers_of_one_subscription_share_its_messages(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    await bc.subscribe("mail")
    seen: list[tuple[str, Any]] = []
    async with (
        BroadcastWorker(bc.name, "mail", _recorder(seen), connection=conn, **FAST) as w1,
        BroadcastWorker(bc.name, "mail", _recorder(seen), connection=conn, **FAST) as w2,
    ):
        ids = [await bc.publish("m", i) for i in range(40)]
        await wait_for(lambda: len(seen) >= 40)
        await asyncio.sleep(0.2)  # give a duplicate the chance to show up
    assert sorted(i for i, _ in seen) == sorted(ids)  # each message once
    assert w1.forwarded + w2.forwarded == 40


async def test_job_options_ordering_key_applies_to_forwarded_jobs(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    await bc.subscribe("ledger")
    ids = [await bc.publish("entry", i) for i in range(12)]
    order: list[int] = []
    running = 0
    most = 0

    async def record(job: Job[Any, Any]) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        order.append(job.data)
        running -= 1

    async with BroadcastWorker(
        bc.name,
        "ledger",
        record,
        connection=conn,
        job_options={"ordering_key": "acct-1", "ttl": 60_000},
        concurrency=4,
        **FAST,
    ):
        await wait_for(lambda: len(order) == 12)
    assert order == list(range(12))  # one at a time, in publish order
    assert most == 1
    async with Queue(subscription_queue(bc.name, "ledger"), connection=conn) as q:
        job = await q.get_job(ids[0])
        assert job is not None
        assert job.ordering_key == "acct-1" and job.group_key == "acct-1"


async def test_a_subscription_gets_messages_from_its_creation_on(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    early = await bc.publish("x", "before any subscription")
    await bc.subscribe("late")
    assert await bc.subscribe("late") is False  # exists already
    after = await bc.publish("x", "after")
    await bc.subscribe("all", from_start=True)
    assert await bc.subscriptions() == ["all", "late"]
    late: list[tuple[str, Any]] = []
    everything: list[tuple[str, Any]] = []
    async with (
        BroadcastWorker(bc.name, "late", _recorder(late), connection=conn, **FAST),
        BroadcastWorker(bc.name, "all", _recorder(everything), connection=conn, **FAST),
    ):
        await wait_for(lambda: len(late) == 1 and len(everything) == 2)
    assert late == [(after, "after")]
    assert sorted(everything) == sorted([(early, "before any subscription"), (after, "after")])
    assert await bc.unsubscribe("late") is True
    assert await bc.unsubscribe("late") is False
    assert await bc.subscriptions() == ["all"]


async def test_messages_of_a_dead_forwarder_are_taken_over(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    await bc.subscribe("s")
    ids = [await bc.publish("m", i) for i in range(5)]
    # a forwarder that read the messages and died before forwarding them
    client = await create_client(conn)
    try:
        read = await client.xreadgroup(
            {bc.key: ">"}, "s", "dead-forwarder", StreamReadGroupOptions(count=10)
        )
        assert read is not None and len(read[bc.key.encode()]) == 5
    finally:
        await close_client(client)
    await asyncio.sleep(0.3)
    seen: list[tuple[str, Any]] = []
    async with BroadcastWorker(
        bc.name, "s", _recorder(seen), connection=conn, reclaim_idle_ms=200, **FAST
    ):
        await wait_for(lambda: len(seen) == 5)
    assert sorted(i for i, _ in seen) == sorted(ids)


async def test_bad_arguments_are_refused(conn: ConnectionOptions) -> None:
    async def noop(job: Job[Any, Any]) -> None:
        return None

    with pytest.raises(ValidationError):
        BroadcastWorker("b", "s", noop, connection=conn, job_options={"job_id": "x"})
    with pytest.raises(ValidationError):
        BroadcastWorker("b", "bad:name", noop, connection=conn)
    with pytest.raises(ValidationError):
        Broadcast("b", connection=conn, max_len=0)
    with pytest.raises(ValidationError):
        BroadcastWorker("b", "s", noop, connection=conn, no_such_option=1)


async def test_subject_filters_deliver_only_matching_messages(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    await bc.subscribe("created", subjects="orders.*.created")
    await bc.subscribe("eu", subjects=["orders.eu.>"])
    await bc.subscribe("all")
    assert await bc.get_subjects("created") == ("orders.*.created",)
    assert await bc.get_subjects("all") is None
    published = {
        subject: await bc.publish("order", subject, subject=subject)
        for subject in ("orders.eu.created", "orders.us.created", "orders.eu.paid.late", "x.y")
    }
    bare = await bc.publish("order", "no subject")
    seen: dict[str, list[tuple[str, Any]]] = {"created": [], "eu": [], "all": []}
    workers = [
        BroadcastWorker(bc.name, sub, _recorder(sink), connection=conn, **FAST)
        for sub, sink in seen.items()
    ]
    async with workers[0], workers[1], workers[2]:
        await wait_for(
            lambda: (len(seen["created"]), len(seen["eu"]), len(seen["all"])) == (2, 2, 5)
        )
        await wait_for(lambda: sum(w.skipped for w in workers) == 3 + 3)
    assert sorted(seen["created"]) == sorted(
        (published[s], s) for s in ("orders.eu.created", "orders.us.created")
    )
    assert sorted(seen["eu"]) == sorted(
        (published[s], s) for s in ("orders.eu.created", "orders.eu.paid.late")
    )
    assert sorted(i for i, _ in seen["all"]) == sorted([*published.values(), bare])
    assert [w.skipped for w in workers] == [3, 3, 0]
    # the skipped messages were acknowledged: nothing is pending, every message is trimmable
    client = await create_client(conn)
    try:
        for sub in seen:
            pending = await client.xpending(bc.key, sub)
            assert pending[0] == 0, sub
    finally:
        await close_client(client)
    async with Queue(subscription_queue(bc.name, "created"), connection=conn) as q:
        assert (await q.get_job_counts()).completed == 2  # no job for a skipped message
    assert await bc.trim() == 5
    assert await bc.length() == 0


async def test_a_worker_sets_the_filter_and_set_subjects_changes_it(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    seen: list[tuple[str, Any]] = []
    async with BroadcastWorker(
        bc.name, "s", _recorder(seen), connection=conn, subjects=["a.>"], **FAST
    ) as worker:
        assert await bc.get_subjects("s") == ("a.>",)
        first = await bc.publish("m", 1, subject="a.b")
        await bc.publish("m", 2, subject="b.a")
        await wait_for(lambda: len(seen) == 1 and worker.skipped == 1)
    assert seen == [(first, 1)]
    await bc.set_subjects("s", None)  # no filter: every message again
    assert await bc.get_subjects("s") is None
    later = await bc.publish("m", 3, subject="b.a")
    async with BroadcastWorker(bc.name, "s", _recorder(seen), connection=conn, **FAST):
        await wait_for(lambda: len(seen) == 2)
    assert seen[-1] == (later, 3)
    assert await bc.unsubscribe("s") is True
    assert await bc.get_subjects("s") is None  # the filter goes with the subscription


async def test_bad_subjects_and_patterns_are_refused(
    bc: Broadcast, conn: ConnectionOptions
) -> None:
    async def noop(job: Job[Any, Any]) -> None:
        return None

    for subject in ("", "a..b", "orders.*", "orders.>", "a b"):
        with pytest.raises(ValidationError) as err:
            await bc.publish("m", 1, subject=subject)
        assert err.value.field == "subject"
    for pattern in ("", "a.>.b", "a.b*", [], "x..y"):
        with pytest.raises(ValidationError) as err:
            await bc.subscribe("s", subjects=pattern)
        assert err.value.field == "subjects"
        with pytest.raises(ValidationError):
            BroadcastWorker(bc.name, "s", noop, connection=conn, subjects=pattern)
    assert await bc.subscriptions() == []  # nothing was created by a refused call
    assert await bc.length() == 0
