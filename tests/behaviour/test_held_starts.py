"""Stall recovery charges only runs known to have started, on every server: a held job
goes back uncharged, one whose start was recorded but not confirmed goes back uncharged
but suspect, a suspect's next start is held, and its stall before a confirmation is charged
with the unsure one (lua/50_fetch_complete.lua "Held jobs", lua/60_fail_stall.lua).

The calls are the worker's own (glidemq.wire.fetch), driven one by one as a worker of a
process that then dies would send them; the reclaim is the owner mode glidemq-run uses.
"""

from __future__ import annotations

from typing import Any

import pytest
from glide import StreamGroupOptions

from glidemq.errors import GlideMQError
from glidemq.wire import fetch
from glidemq.wire.layout import send
from tests.behaviour.conftest import Backend

NO_LIMITER = ("0", "0")
CAUSE = "worker process killed by SIGKILL while running"


async def _context(backend: Backend) -> Any:
    """The queue's context, with the consumer group a worker would create."""
    ctx = await backend.queue._context()
    stream, opts = ctx.keys.stream, StreamGroupOptions(make_stream=True)
    await ctx.command(lambda c: c.xgroup_create(stream, "workers", "0", opts))
    return ctx


async def _three_jobs(backend: Backend) -> tuple[Any, tuple[str, str, str]]:
    """Three waiting jobs and the queue's context: (context, their ids)."""
    jobs = await backend.queue.add_bulk([("j", {"i": i}, None) for i in range(3)])
    a, b, c = (j.id for j in jobs)
    return await _context(backend), (a, b, c)


async def _take(ctx: Any, consumer: str, n: int, start_now: int) -> dict[str, tuple[str, dict]]:
    """Fetch up to n jobs as `consumer`, the first `start_now` starting at once: {job id:
    (entry id, the fields returned)}."""
    got = await fetch.complete_and_fetch_next(
        ctx, ctx.now_ms(), consumer, n, "1", (), NO_LIMITER, start_now
    )
    flat = got.entries
    out = {}
    for i in range(0, len(flat), 3):
        it = iter(flat[i + 2])
        out[flat[i + 1].decode()] = (flat[i].decode(), dict(zip(it, it, strict=True)))
    return out


async def _call(ctx: Any, consumer: str, started: list[str], confirmed: list[str]) -> None:
    await fetch.complete_and_fetch_next(
        ctx, ctx.now_ms(), consumer, 0, "1", (), NO_LIMITER, 0, started, confirmed
    )


async def _die(
    ctx: Any, consumer: str, max_stalled: int = 1, began: list[str] | None = None
) -> tuple[int, int]:
    """Owner-mode reclaim of everything `consumer` holds, as after its process died
    (`began`: the entries its supervisor's run ledger had as begun)."""
    reply = await fetch.reclaim_stalled(
        ctx, ctx.now_ms(), consumer, 0, "0-0", 100, max_stalled, "1", (-1, 0), False,
        owner=consumer, cause=CAUSE, began=began,
    )  # fmt: skip
    return int(reply[1]), int(reply[2])


async def test_only_started_runs_are_charged_and_a_suspect_pays_for_both(
    backend: Backend,
) -> None:
    queue = backend.queue
    ctx, (a, b, c) = await _three_jobs(backend)

    took = await _take(ctx, "w1", 3, start_now=1)  # a starts at once, b and c are held
    assert set(took) == {a, b, c}
    assert b"heldEntry" not in took[a][1] and took[b][1][b"heldEntry"] == took[b][0].encode()
    await _call(ctx, "w1", [took[b][0], b], [])  # b about to start: recorded
    await _call(ctx, "w1", [], [took[a][0], a])  # a's run under way: confirmed
    assert await _die(ctx, "w1") == (3, 0)

    ja, jb, jc = [await queue.get_job(i) for i in (a, b, c)]
    assert ja.stalled_count == 1 and ja.failures[-1]["reason"] == CAUSE  # it ran
    assert jb.stalled_count == 0  # it may not have run: unsure
    assert jb.failures[-1]["reason"] == CAUSE + " (it may not have started)"
    assert jc.stalled_count == 0 and jc.failures == []  # held, never started
    assert {j.state for j in (ja, jb, jc)} == {"waiting"}

    # b is suspect now: held by every fetch, and charged for a stall before a confirmation
    took = await _take(ctx, "w2", 3, start_now=3)
    assert took[b][1][b"heldEntry"] == took[b][0].encode() and b"suspect" in took[b][1]
    assert b"heldEntry" not in took[a][1] and b"heldEntry" not in took[c][1]
    await _call(ctx, "w2", [took[b][0], b], [])
    assert await _die(ctx, "w2") == (2, 1)
    jb = await queue.get_job(b)
    assert jb.state == "failed", jb
    assert jb.failed_reason == f"job stalled more than allowable limit: {CAUSE}"
    ja, jc = await queue.get_job(a), await queue.get_job(c)
    assert ja.stalled_count == 1 and jc.stalled_count == 0  # both unsure this time


async def test_the_run_ledger_tells_a_recorded_start_that_never_ran_from_one_that_did(
    backend: Backend,
) -> None:
    queue = backend.queue
    ctx, (a, b, c) = await _three_jobs(backend)

    took = await _take(ctx, "w1", 3, start_now=0)  # all three held
    for job_id in (a, b, c):
        await _call(ctx, "w1", [took[job_id][0], job_id], [])  # each start recorded
    # the process died with a's run begun; b and c never began
    assert await _die(ctx, "w1", began=[took[a][0]]) == (3, 0)
    ja, jb, jc = [await queue.get_job(i) for i in (a, b, c)]
    assert ja.failures[-1]["reason"] == CAUSE + " (it may not have started)"
    assert ja.stalled_count == 0  # unsure as without a ledger: it may be the killer
    for j in (jb, jc):
        assert j.stalled_count == 0 and j.failures == [] and j.state == "waiting"
    took = await _take(ctx, "w2", 3, start_now=3)
    assert b"suspect" in took[a][1]  # the unsure one runs alone next
    assert b"suspect" not in took[b][1] and b"suspect" not in took[c][1]


async def test_a_run_ledger_that_is_not_a_list_of_entry_ids_is_refused(backend: Backend) -> None:
    await backend.queue.add("j", {})
    ctx = await _context(backend)
    await _take(ctx, "w1", 1, start_now=1)
    good = fetch.reclaim_stalled_call(
        ctx.keys, ctx.now_ms(), "w1", 0, "0-0", 100, 1, "1", (-1, 0), False,
        owner="w1", cause=CAUSE, began=[],
    )  # fmt: skip
    for bad in ("{", '["x"]', "[1]", '{"a": "1-0"}'):
        with pytest.raises(GlideMQError, match="ERR:BAD_ARGS"):
            await send(ctx, good._replace(args=[*good.args[:-1], bad]))
    assert await _die(ctx, "w1", began=[]) == (1, 0)  # known empty: nothing had begun


async def test_a_job_that_never_gets_to_start_fails_after_twenty_uncharged_reclaims(
    backend: Backend,
) -> None:
    job = await backend.queue.add("j", {})
    ctx = await _context(backend)
    for n in range(1, 22):
        took = await _take(ctx, f"w{n}", 1, start_now=0)
        assert job.id in took
        requeued, failed = await _die(ctx, f"w{n}")
        if n <= 20:
            assert (requeued, failed) == (1, 0), n
    stored = await backend.queue.get_job(job.id)
    assert stored.state == "failed" and stored.stalled_count == 0
    assert stored.failed_reason == "job was taken 21 times by workers that died before starting it"


async def test_calls_without_the_start_arguments_record_every_start(backend: Backend) -> None:
    job = await backend.queue.add("j", {})
    ctx = await _context(backend)
    got = await fetch.complete_and_fetch_next(ctx, ctx.now_ms(), "w", 1, "1", (), NO_LIMITER)
    assert got.entries and b"heldEntry" not in got.entries[2]
    assert await _die(ctx, "w") == (1, 0)
    assert (await backend.queue.get_job(job.id)).stalled_count == 1
