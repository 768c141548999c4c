"""A fetch whose answer never reached its worker hands its jobs back uncharged, on every
server (glidemq_forgetFetch, lua/60_fail_stall.lua): the worker names the lost call's token,
the jobs it took go back to waiting with no stall charged, the entries a later try of the
same call delivered stay, and a try still on its way when the token was forgotten takes
nothing (glidemq/worker/forget.py)."""

from __future__ import annotations

from typing import Any

from glide import StreamGroupOptions

from glidemq.wire import fetch
from tests.behaviour.conftest import Backend

NO_LIMITER = ("0", "0")


async def _context(backend: Backend) -> Any:
    ctx = await backend.queue._context()
    stream, opts = ctx.keys.stream, StreamGroupOptions(make_stream=True)
    await ctx.command(lambda c: c.xgroup_create(stream, "workers", "0", opts))
    return ctx


async def _take(ctx: Any, consumer: str, n: int, token: str) -> dict[str, str]:
    """Fetch up to n jobs as `consumer` with `token`, every start recorded as it happens
    (no hold window): {job id: entry id}."""
    got = await fetch.complete_and_fetch_next(
        ctx, ctx.now_ms(), consumer, n, "1", (), NO_LIMITER, token=token
    )
    flat = got.entries
    return {flat[i + 1].decode(): flat[i].decode() for i in range(0, len(flat), 3)}


async def test_the_jobs_of_a_lost_fetch_go_back_uncharged(backend: Backend) -> None:
    queue = backend.queue
    a, b, c = (j.id for j in await queue.add_bulk([("j", {"i": i}, None) for i in range(3)]))
    ctx = await _context(backend)
    lost = await _take(ctx, "w1", 2, "t.1")  # its answer "never arrived"
    kept = await _take(ctx, "w1", 1, "t.2")
    assert set(lost) == {a, b} and set(kept) == {c}

    assert await fetch.forget_fetch(ctx, ctx.keys, "w1", "t.1") == 2
    for job_id in (a, b):
        job = await queue.get_job(job_id)
        assert job is not None and job.state == "waiting" and job.stalled_count == 0
    assert (await queue.get_job(c)).state == "active"  # another token's job stays
    # the stall check that would have charged them finds nothing of theirs
    reply = await fetch.reclaim_stalled(
        ctx, ctx.now_ms() + 10**6, "sweeper", 0, "0-0", 100, 0, "1", (-1, 0), False
    )
    assert (int(reply[1]), int(reply[2])) == (0, 1)  # c alone: max_stalled_count 0 fails it
    again = await _take(ctx, "w2", 5, "u.1")
    assert set(again) == {a, b}


async def test_a_later_try_of_the_call_keeps_what_it_delivered(backend: Backend) -> None:
    queue = backend.queue
    a, b = (j.id for j in await queue.add_bulk([("j", {"i": i}, None) for i in range(2)]))
    ctx = await _context(backend)
    first = await _take(ctx, "w1", 1, "t.1")  # a try whose answer was lost
    second = await _take(ctx, "w1", 1, "t.1")  # the retry, answered
    assert set(first) == {a} and set(second) == {b}
    assert await fetch.forget_fetch(ctx, ctx.keys, "w1", "t.1", [second[b]]) == 1
    assert (await queue.get_job(a)).state == "waiting"
    assert (await queue.get_job(b)).state == "active"


async def test_a_try_that_arrives_after_its_token_was_forgotten_takes_nothing(
    backend: Backend,
) -> None:
    queue = backend.queue
    (a,) = (j.id for j in await queue.add_bulk([("j", {}, None)]))
    ctx = await _context(backend)
    assert await fetch.forget_fetch(ctx, ctx.keys, "w1", "t.9") == 0  # before the call ran
    assert await _take(ctx, "w1", 1, "t.9") == {}
    job = await queue.get_job(a)
    assert job is not None and job.state == "waiting"
    assert set(await _take(ctx, "w1", 1, "t.10")) == {a}  # a later fetch gets it


async def test_forget_fetch_refuses_bad_arguments(backend: Backend) -> None:
    ctx = await _context(backend)
    for args in (["", "t"], ["w1", ""], ["w1", "t", "not-an-id"]):
        call = fetch.FORGET_FETCH.call([ctx.keys.stream, ctx.keys.events], args)
        try:
            await ctx.fcall(call.function, call.keys, call.args)
        except Exception as exc:  # ServerError with the library's code
            assert "ERR:BAD_ARGS" in str(exc)
        else:
            raise AssertionError(f"glidemq_forgetFetch accepted {args}")
