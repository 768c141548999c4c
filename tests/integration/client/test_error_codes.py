"""Retry decisions read the code of a server's error reply, never words found elsewhere in
its message. The errors here are real replies of the session's Valkey (scripts that fail,
commands on a missing key, replies inside a batch), as valkey-glide hands them back."""

from __future__ import annotations

from typing import Any

import pytest
from glide import Batch, GlideClient

from glidemq import Broadcast, ConnectionOptions, Job, Queue, Worker
from glidemq.client.connection import close_client, create_client
from glidemq.client.retry import Failure, classify, error_code
from glidemq.errors import ServerError
from tests.helpers import FAST, wait_for


async def _error(client: Any, *command: str) -> BaseException:
    try:
        await client.custom_command(list(command))
    except Exception as exc:
        return exc
    raise AssertionError(f"{command} did not fail")


@pytest.fixture
async def client(standalone_conn: ConnectionOptions) -> Any:
    c = await create_client(standalone_conn)
    yield c
    await close_client(c)


async def test_a_script_error_that_mentions_a_missing_function_is_not_one(client: Any) -> None:
    # before, any message holding "function not found" reloaded the library and ran the
    # call again: a script that failed (and may have written) would have run twice
    exc = await _error(client, "EVAL", "error('lookup: function not found in table')", "0")
    assert error_code(exc).code == "ERR"
    assert classify(exc) is Failure.FATAL
    missing = await _error(client, "FCALL", "glidemq_no_such_function", "0")
    assert classify(missing) is Failure.MISSING_LIBRARY


async def test_codes_come_out_of_every_form_valkey_glide_writes(client: Any) -> None:
    wrong = await _error(client, "XADD", "{k}nohash", "*")  # missing field: a syntax ERR
    assert error_code(wrong).code == "ERR"
    await client.set("{k}str", "x")
    typed = await _error(client, "XADD", "{k}str", "*", "a", "b")
    assert error_code(typed).code == "WRONGTYPE"
    ours = await _error(client, "EVAL", "return redis.error_reply('ERR:STATE waiting')", "0")
    assert (error_code(ours).code, error_code(ours).text) == ("ERR:STATE", "waiting")
    # a reply that only *says* MOVED in its text did not move anything
    said = await _error(client, "EVAL", "error('the job MOVED to another queue')", "0")
    assert classify(said) is Failure.FATAL
    batch = Batch(is_atomic=False)
    batch.custom_command(["EVAL", "return redis.error_reply('MOVED 1 127.0.0.1:1')", "0"])
    batch.custom_command(["EVAL", "return redis.error_reply('TRYAGAIN later')", "0"])
    batch.custom_command(["EVAL", "return redis.error_reply('NOGROUP none')", "0"])
    assert isinstance(client, GlideClient)
    moved, again, nogroup = await client.exec(batch, raise_on_error=False)
    assert [error_code(r).code for r in (moved, again, nogroup)] == ["MOVED", "TRYAGAIN", "NOGROUP"]
    assert [classify(r) for r in (moved, again, nogroup)] == [
        Failure.NOT_RUN,
        Failure.NOT_RUN,
        Failure.FATAL,
    ]


async def test_server_errors_carry_their_code(queue: Queue[Any, Any]) -> None:
    ctx = await queue._context()
    stream = queue.keys.stream
    await ctx.command(lambda c: c.xadd(stream, [("x", "1")]))
    with pytest.raises(ServerError) as caught:
        await ctx.command(lambda c: c.xgroup_create(stream, "g", "0"))
        await ctx.command(lambda c: c.xgroup_create(stream, "g", "0"))
    assert caught.value.code == "BUSYGROUP"


async def test_a_worker_recreates_its_group_when_the_server_lost_it(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    done: list[str] = []

    async def work(job: Job[Any, Any]) -> None:
        done.append(job.name)

    async with Worker(queue.name, work, connection=conn, **FAST):
        await queue.add("before", {})
        await wait_for(lambda: done == ["before"], timeout=20)
        ctx = await queue._context()
        stream = queue.keys.stream
        await ctx.command(lambda c: c.xgroup_destroy(stream, "workers"))  # NOGROUP from now
        await queue.add("after", {})
        await wait_for(lambda: done == ["before", "after"], timeout=30)


async def test_a_broadcast_that_never_was_has_no_subscriptions_to_drop(
    conn: ConnectionOptions, queue_name: str
) -> None:
    async with Broadcast(queue_name, connection=conn) as never:
        assert await never.unsubscribe("readers") is False  # raised a ServerError before
        assert await never.subscriptions() == []
