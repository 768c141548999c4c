"""A worker's calls: taking, finishing, failing, holding and handing back jobs, promotion,
stall recovery and rate limits.

Replies on the worker's hot path are handed back as the server gives them (documented per
function) so that no per-job work is added here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from glide import (
    Batch,
    BatchOptions,
    ClusterBatch,
    ClusterBatchOptions,
    GlideClusterClient,
    MaxId,
    MinId,
    StreamPendingOptions,
    StreamReadGroupOptions,
)

from ..client.connection import Client
from ..client.context import QueueContext
from ..keys import QueueKeys
from .layout import Call, Sender, layout, send

__all__ = [
    "ACTIVATE_WOKEN",
    "COMPLETE_AND_FETCH_NEXT",
    "DEFER_ACTIVE",
    "FAIL",
    "HEARTBEAT",
    "MOVE_ACTIVE_TO_DELAYED",
    "MOVE_TO_ACTIVE",
    "PROMOTE",
    "RATE_LIMIT",
    "RECLAIM_STALLED",
    "RETURN_HELD",
    "Completion",
    "Fetched",
    "activate_woken",
    "activate_woken_call",
    "any_stalled",
    "complete_and_fetch_next",
    "complete_and_fetch_next_call",
    "defer_active",
    "defer_active_call",
    "fail",
    "fail_call",
    "heartbeat",
    "heartbeat_call",
    "move_active_to_delayed",
    "move_active_to_delayed_call",
    "move_to_active",
    "move_to_active_call",
    "promote",
    "promote_call",
    "rate_limit",
    "rate_limit_call",
    "reclaim_stalled",
    "reclaim_stalled_call",
    "return_held",
    "return_held_call",
    "stalled_owners",
    "wait_and_activate",
]

COMPLETE_AND_FETCH_NEXT = layout("glidemq_completeAndFetchNext", keys="5", args="5..", safe=True)
MOVE_TO_ACTIVE = layout("glidemq_moveToActive", keys="5", args="4..")
ACTIVATE_WOKEN = layout("glidemq_activateWoken", keys="5", args="6..8", safe=True)
FAIL = layout("glidemq_fail", keys="5", args="9..10", safe=True)
RECLAIM_STALLED = layout("glidemq_reclaimStalled", keys="5", args="7..13", safe=True)
DEFER_ACTIVE = layout("glidemq_deferActive", keys="2", args="1..", safe=True)
RETURN_HELD = layout("glidemq_returnHeld", keys="2", args="3..", safe=True)
FORGET_FETCH = layout("glidemq_forgetFetch", keys="2", args="2..", safe=True)
HEARTBEAT = layout("glidemq_heartbeat", keys="1", args="1..", safe=True)
MOVE_ACTIVE_TO_DELAYED = layout("glidemq_moveActiveToDelayed", keys="3", args="5..6", safe=True)
PROMOTE = layout("glidemq_promote", keys="3", args="2..3", safe=True)
RATE_LIMIT = layout("glidemq_rateLimit", keys="3", args="2..4", safe=True)

GROUP = "workers"
"""The consumer group every worker reads the stream through."""
_PIPELINE_SLACK_MS = 2000


def _fetch_keys(k: QueueKeys) -> list[str]:
    return [k.stream, k.completed, k.events, k.scheduled, k.meta]


def _fail_keys(k: QueueKeys) -> list[str]:
    return [k.stream, k.failed, k.events, k.scheduled, k.meta]


Completion = tuple[str, str, bytes, int, int]
"""One finished job for completeAndFetchNext: job id, entry id, encoded return value, and the
completed-retention count and age (0 for none)."""


def complete_and_fetch_next_call(
    keys: QueueKeys,
    now: int,
    consumer: str,
    fetch: int,
    emit: str,
    completions: Sequence[Completion],
    limiter: Sequence[str],
    start_now: int | None = None,
    started: Sequence[str] = (),
    confirmed: Sequence[str] = (),
    token: str | None = None,
) -> Call:
    """glidemq_completeAndFetchNext: record `completions` and take up to `fetch` new jobs for
    `consumer`; `emit` is the events flag, `limiter` the worker limiter's max and duration
    ('0', '0' without one). How starts are recorded (docs/DESIGN_NOTES.md, "Held jobs"):
    `start_now` of the jobs taken start at once (None: all, each recorded as it starts),
    the others are held; `started`, the start report of held jobs about to start, and
    `confirmed`, jobs whose run is under way, entry and job id after each other. `token`
    marks the jobs taken, for `forget_fetch` should the answer never arrive."""
    args: list[str | bytes] = [str(now), consumer, str(fetch), emit, str(len(completions))]
    for job_id, entry_id, value, keep_count, keep_age in completions:
        args += [job_id, entry_id, value, str(keep_count), str(keep_age)]
    args += limiter
    if token is not None:
        if start_now is not None:
            start = str(start_now)
        else:  # '': every job recorded as it starts, unless starts are reported
            start = str(fetch) if started or confirmed else ""
        args += [start, str(len(started) // 2), token, *started, *confirmed]
    elif start_now is not None or started or confirmed:
        first = fetch if start_now is None else start_now
        args += [str(first), str(len(started) // 2), *started, *confirmed]
    return COMPLETE_AND_FETCH_NEXT.call(_fetch_keys(keys), args)


class Fetched(NamedTuple):
    """What glidemq_completeAndFetchNext answered."""

    statuses: list[bytes]
    """One per completion sent: b'ok', b'stale' (another worker owns the job now), ..."""
    entries: list[Any]
    """The jobs taken, flat: entry id, job id, fields (a flat list of pairs), ..."""
    paused: bool
    """The queue is paused: nothing was taken."""
    limited_ms: int
    """> 0: a queue-wide limit stopped the fetch for this long."""
    quarantined: list[Any]
    """Entry ids glidemq did not write, moved to the queue's quarantine stream."""


async def complete_and_fetch_next(
    ctx: QueueContext,
    now: int,
    consumer: str,
    fetch: int,
    emit: str,
    completions: Sequence[Completion],
    limiter: Sequence[str],
    start_now: int | None = None,
    started: Sequence[str] = (),
    confirmed: Sequence[str] = (),
    token: str | None = None,
    on_ambiguous: Callable[[], None] | None = None,
) -> Fetched:
    """Store the completions and take up to `fetch` jobs, in one call (the starts and
    `token` as for `complete_and_fetch_next_call`). `on_ambiguous` runs when a try of the
    call fails in a way that may have run it (a later try may still succeed)."""
    call = complete_and_fetch_next_call(
        ctx.keys, now, consumer, fetch, emit, completions, limiter, start_now, started,
        confirmed, token,
    )  # fmt: skip
    reply = await ctx.fcall(
        call.function, call.keys, call.args, safe=call.safe, on_ambiguous=on_ambiguous
    )
    return fetched_of(reply)


def fetched_of(r: Any) -> Fetched:
    """A glidemq_completeAndFetchNext reply as a Fetched."""
    n = len(r)
    return Fetched(
        r[0], r[1], n > 2 and r[2] == 1, int(r[3]) if n > 3 else 0, r[4] if n > 4 else []
    )


def move_to_active_call(
    keys: QueueKeys, now: int, emit: str, limiter: Sequence[str], pairs: Sequence[str]
) -> Call:
    """glidemq_moveToActive of entries a blocking read delivered: `pairs` is entry id, job id,
    entry id, job id...; `limiter` as for completeAndFetchNext. Not resent after an ambiguous
    failure: a second run would drop the entries."""
    args: list[str | bytes] = [str(now), emit, *limiter, *pairs]
    return MOVE_TO_ACTIVE.call(_fetch_keys(keys), args)


async def move_to_active(
    ctx: QueueContext, now: int, emit: str, limiter: Sequence[str], pairs: Sequence[str]
) -> Any:
    """The activated entries flat (entry, id, fields), as completeAndFetchNext's second item."""
    return await send(ctx, move_to_active_call(ctx.keys, now, emit, limiter, pairs))


def activate_woken_call(
    keys: QueueKeys,
    consumer: str,
    wake: str,
    count: int,
    emit: str,
    limiter: Sequence[str],
    start_now: int | None = None,
    token: str | None = None,
) -> Call:
    """glidemq_activateWoken: move up to `count` entries a blocking read delivered to `wake`
    over to `consumer` and activate them; `limiter`, `start_now` and `token` as for
    completeAndFetchNext."""
    args: list[str | bytes] = [consumer, wake, str(count), emit, *limiter]
    if start_now is not None or token is not None:
        args.append("" if start_now is None else str(start_now))
    if token is not None:
        args.append(token)
    return ACTIVATE_WOKEN.call(_fetch_keys(keys), args)


async def activate_woken(
    ctx: QueueContext,
    consumer: str,
    wake: str,
    count: int,
    emit: str,
    limiter: Sequence[str],
    start_now: int | None = None,
    token: str | None = None,
    on_ambiguous: Callable[[], None] | None = None,
) -> Any:
    """[activated entries flat (entry, id, fields), quarantined entry ids]; `on_ambiguous`
    as for `complete_and_fetch_next`."""
    call = activate_woken_call(ctx.keys, consumer, wake, count, emit, limiter, start_now, token)
    return await ctx.fcall(
        call.function, call.keys, call.args, safe=call.safe, on_ambiguous=on_ambiguous
    )


async def wait_and_activate(
    client: Client,
    keys: QueueKeys,
    consumer: str,
    wake: str,
    count: int,
    block_ms: int,
    emit: str,
    limiter: Sequence[str],
    start_now: int | None = None,
    token: str | None = None,
) -> tuple[Any, Any]:
    """A blocking read of up to `count` new entries for `wake`, with glidemq_activateWoken
    queued behind it in one pipeline on `client` (a blocking reader's own client): the server
    activates what the read returns at once, without a second round trip. Returns the read's
    reply and activateWoken's, each possibly the RequestError it failed with. Raises what
    valkey-glide raises when the pipeline as a whole fails (closed client, timeout)."""
    call = activate_woken_call(keys, consumer, wake, count, emit, limiter, start_now, token)
    read = StreamReadGroupOptions(block_ms=block_ms, count=count)
    # the read may block for block_ms; the pipeline's own deadline must outlast it
    timeout = block_ms + _PIPELINE_SLACK_MS
    cluster = isinstance(client, GlideClusterClient)
    batch = ClusterBatch(is_atomic=False) if cluster else Batch(is_atomic=False)
    batch.xreadgroup({keys.stream: ">"}, GROUP, wake, read)
    batch.fcall(call.function, call.keys, call.args)
    options = ClusterBatchOptions(timeout=timeout) if cluster else BatchOptions(timeout=timeout)
    reply = await client.exec(batch, False, options)
    assert reply is not None and len(reply) == 2  # only an atomic batch under WATCH gives None
    return reply[0], reply[1]


def fail_call(
    keys: QueueKeys,
    now: int,
    emit: str,
    job_id: str,
    entry_id: str,
    reason: str,
    delay: int,
    keep: tuple[int, int],
    dead_letter: bool,
    stack: str,
) -> Call:
    """glidemq_fail of one try of a running job: retried after `delay` ms (-1: no retry)."""
    return FAIL.call(
        _fail_keys(keys),
        [
            str(now),
            emit,
            job_id,
            entry_id,
            reason,
            str(delay),
            str(keep[0]),
            str(keep[1]),
            "1" if dead_letter else "0",
            stack,
        ],
    )


async def fail(
    ctx: QueueContext,
    now: int,
    emit: str,
    job_id: str,
    entry_id: str,
    reason: str,
    delay: int,
    keep: tuple[int, int],
    dead_letter: bool,
    stack: str,
) -> Any:
    """'retry', 'failed', 'stale' ... (as bytes)."""
    return await send(
        ctx,
        fail_call(ctx.keys, now, emit, job_id, entry_id, reason, delay, keep, dead_letter, stack),
    )


def reclaim_stalled_call(
    keys: QueueKeys,
    now: int,
    consumer: str,
    lock_ms: int,
    cursor: str,
    count: int,
    max_stalled: int,
    emit: str,
    keep: tuple[int, int],
    dead_letter: bool,
    owner: str | None = None,
    cause: str = "",
    began: Sequence[str] | None = None,
) -> Call:
    """glidemq_reclaimStalled: take over entries idle longer than `lock_ms`, from `cursor`;
    with `owner`, only what that (dead) consumer holds, whatever their idle time, `cause`,
    how it died (kept with each job it was running), and `began`, the entries whose run had
    begun when it died (None: unknown)."""
    args: list[str | bytes] = [
        str(now),
        consumer,
        str(lock_ms),
        cursor,
        str(count),
        str(max_stalled),
        emit,
        str(keep[0]),
        str(keep[1]),
        "1" if dead_letter else "0",
    ]
    if owner is not None:
        args.append(owner)
        if cause or began is not None:
            args.append(cause)
        if began is not None:
            args.append(json.dumps(list(began)))
    return RECLAIM_STALLED.call(_fail_keys(keys), args)


async def any_stalled(ctx: QueueContext, lock_ms: int) -> bool:
    """Whether the stream's pending list has an entry idle for `lock_ms` or longer (a plain
    XPENDING; the stall scan looks before it reclaims)."""
    return bool(await stalled_owners(ctx, lock_ms, 1))


async def stalled_owners(ctx: QueueContext, lock_ms: int, count: int = 100) -> dict[str, int]:
    """The consumers holding entries idle for `lock_ms` or longer, with how many of the
    first `count` such entries each holds; empty when there is none (a plain XPENDING)."""
    stream = ctx.keys.stream
    idle = StreamPendingOptions(min_idle_time_ms=lock_ms)
    pending = await ctx.command(
        lambda c: c.xpending_range(stream, GROUP, MinId(), MaxId(), count, idle)
    )
    owners: dict[str, int] = {}
    for entry in pending or ():
        raw = entry[1]
        name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        owners[name.removesuffix(":wake")] = owners.get(name.removesuffix(":wake"), 0) + 1
    return owners


async def reclaim_stalled(
    ctx: QueueContext,
    now: int,
    consumer: str,
    lock_ms: int,
    cursor: str,
    count: int,
    max_stalled: int,
    emit: str,
    keep: tuple[int, int],
    dead_letter: bool,
    owner: str | None = None,
    cause: str = "",
    began: Sequence[str] | None = None,
) -> Any:
    """[next cursor, re-queued, failed]."""
    call = reclaim_stalled_call(
        ctx.keys, now, consumer, lock_ms, cursor, count, max_stalled, emit, keep, dead_letter,
        owner, cause, began,
    )  # fmt: skip
    return await send(ctx, call)


def defer_active_call(
    keys: QueueKeys, consumer: str, pairs: Sequence[str | bytes] = (), *, stream: str | None = None
) -> Call:
    """glidemq_deferActive: hand back running entries of `consumer` (all of them when
    `pairs`, entry and job id after each other, is empty). `stream`: another stream key of
    the queue than its main one."""
    return DEFER_ACTIVE.call([stream or keys.stream, keys.events], [consumer, *pairs])


async def defer_active(
    ctx: QueueContext,
    consumer: str,
    pairs: Sequence[str | bytes] = (),
    *,
    stream: str | None = None,
) -> int:
    """How many jobs went back to the queue."""
    return int(await send(ctx, defer_active_call(ctx.keys, consumer, pairs, stream=stream)) or 0)


def return_held_call(keys: QueueKeys, consumer: str, pairs: Sequence[str | bytes]) -> Call:
    """glidemq_returnHeld: hand back entries `consumer` took but never started (entry and
    job id after each other, at least one pair); at-most-once jobs go back to waiting too."""
    return RETURN_HELD.call([keys.stream, keys.events], [consumer, *pairs])


async def return_held(ctx: QueueContext, consumer: str, pairs: Sequence[str | bytes]) -> int:
    """How many of the held jobs went back to the queue."""
    return int(await send(ctx, return_held_call(ctx.keys, consumer, pairs)) or 0)


def forget_fetch_call(keys: QueueKeys, consumer: str, token: str, keep: Sequence[str]) -> Call:
    """glidemq_forgetFetch: the call that fetched for `consumer` with `token` failed without an
    answer (or only a later try of it was answered, taking the entries `keep`): hand back the
    other jobs it took, uncharged."""
    return FORGET_FETCH.call([keys.stream, keys.events], [consumer, token, *keep])


async def forget_fetch(
    sender: Sender, keys: QueueKeys, consumer: str, token: str, keep: Sequence[str] = ()
) -> int:
    """How many jobs went back to the queue. Send it on the client the failed call used."""
    return int(await send(sender, forget_fetch_call(keys, consumer, token, keep)) or 0)


def heartbeat_call(keys: QueueKeys, consumer: str, pairs: Sequence[str]) -> Call:
    """glidemq_heartbeat of the entries `consumer` runs (entry and job id after each other)."""
    return HEARTBEAT.call([keys.stream], [consumer, *pairs])


async def heartbeat(
    ctx: QueueContext, consumer: str, pairs: Sequence[str]
) -> tuple[list[bytes], list[bytes]]:
    """(entries the consumer lost, jobs revoked while running)."""
    lost, revoked = await send(ctx, heartbeat_call(ctx.keys, consumer, pairs))
    return list(lost), list(revoked)


def move_active_to_delayed_call(
    keys: QueueKeys, now: int, job_id: str, entry_id: str, run_at: int, step: str = ""
) -> Call:
    """glidemq_moveActiveToDelayed: a running job waits until `run_at` (ms)."""
    return MOVE_ACTIVE_TO_DELAYED.call(
        [keys.stream, keys.scheduled, keys.events],
        [str(now), job_id, entry_id, str(run_at), "1", step],
    )


async def move_active_to_delayed(
    ctx: QueueContext, now: int, job_id: str, entry_id: str, run_at: int, step: str = ""
) -> str:
    """'delayed', or another state when the worker no longer owns the job."""
    reply = await send(
        ctx, move_active_to_delayed_call(ctx.keys, now, job_id, entry_id, run_at, step)
    )
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def promote_call(keys: QueueKeys, now: int, count: int, concurrency: int) -> Call:
    """glidemq_promote: move up to `count` due delayed jobs to the stream."""
    return PROMOTE.call(
        [keys.scheduled, keys.stream, keys.events], [str(now), str(count), str(concurrency)]
    )


async def promote(ctx: QueueContext, now: int, count: int, concurrency: int) -> tuple[int, int]:
    """(jobs promoted, when the next is due in ms; -1 when none is)."""
    reply = await send(ctx, promote_call(ctx.keys, now, count, concurrency))
    return int(reply[0]), int(reply[1])


def rate_limit_call(
    keys: QueueKeys, now: int, ms: int, job_id: str | None = None, entry_id: str = ""
) -> Call:
    """glidemq_rateLimit: pause the queue for `ms` (it only ever moves later); with `job_id`,
    also hand that running job back without counting an attempt."""
    args: list[str | bytes] = [str(now), str(ms)]
    if job_id is not None:
        args += [job_id, entry_id]
    return RATE_LIMIT.call([keys.stream, keys.meta, keys.events], args)


async def rate_limit(
    ctx: QueueContext, now: int, ms: int, job_id: str | None = None, entry_id: str = ""
) -> str:
    """'ok' when the job went back, else what the server answered."""
    reply = await send(ctx, rate_limit_call(ctx.keys, now, ms, job_id, entry_id))
    return reply.decode() if isinstance(reply, bytes) else str(reply)
