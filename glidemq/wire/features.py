"""Job features beyond the queue core: usage reports and summaries, job streams,
suspend / signal; the queue's recorded serializer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..client.context import QueueContext
from ..encoding.serializers import DEFAULT_SERIALIZER, SERIALIZER_FIELD
from ..errors import SerializerMismatchError
from ..keys import QueueKeys
from .layout import Call, layout, send

__all__ = [
    "EXPIRE_SUSPENDED",
    "REPORT_USAGE",
    "SIGNAL",
    "STREAM_CHUNK",
    "SUSPEND",
    "USAGE_SUMMARY",
    "claim_serializer",
    "expire_suspended",
    "expire_suspended_call",
    "report_usage",
    "report_usage_call",
    "signal",
    "signal_call",
    "stream_chunk",
    "stream_chunk_call",
    "suspend",
    "suspend_call",
    "usage_summary",
    "usage_summary_call",
]

REPORT_USAGE = layout("glidemq_reportUsage", keys="2", args="8..")
USAGE_SUMMARY = layout("glidemq_usageSummary", keys="1", args="2")
STREAM_CHUNK = layout("glidemq_streamChunk", keys="2", args="3..")
SUSPEND = layout("glidemq_suspend", keys="3", args="6")
SIGNAL = layout("glidemq_signal", keys="3", args="5")
EXPIRE_SUSPENDED = layout("glidemq_expireSuspended", keys="2", args="2")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def report_usage_call(
    keys: QueueKeys,
    job_id: str,
    now: int,
    model: str,
    provider: str,
    tokens: Mapping[str, int],
    costs: Mapping[str, float],
    latency_ms: int,
    per_minute: tuple[int, int] | None = None,
) -> Call:
    """glidemq_reportUsage: one model call of `job_id`; `per_minute` is the worker's token
    limit (max tokens, window ms), checked in the same call."""
    tpm = (str(per_minute[0]), str(per_minute[1])) if per_minute else ("0", "0")
    args: list[str | bytes] = [
        job_id,
        str(now),
        model,
        provider,
        str(latency_ms),
        *tpm,
        str(len(tokens)),
    ]
    for kind, n in tokens.items():
        args += [kind, str(n)]
    for kind, x in costs.items():
        args += [kind, repr(float(x))]
    return REPORT_USAGE.call([keys.base + "usage", keys.job(job_id)], args)


async def report_usage(
    ctx: QueueContext,
    job_id: str,
    now: int,
    model: str,
    provider: str,
    tokens: Mapping[str, int],
    costs: Mapping[str, float],
    latency_ms: int,
    per_minute: tuple[int, int] | None = None,
) -> bytes | str | None:
    """The job's `usage` JSON after the report; None when the job does not exist."""
    call = report_usage_call(
        ctx.keys, job_id, now, model, provider, tokens, costs, latency_ms, per_minute
    )
    reply = await send(ctx, call)
    return reply if isinstance(reply, bytes | str) else None


def usage_summary_call(index: str, first_minute: int, last_minute: int) -> Call:
    """glidemq_usageSummary of the per-minute buckets `first_minute..last_minute`."""
    return USAGE_SUMMARY.call([index], [str(first_minute), str(last_minute)])


async def usage_summary(
    ctx: QueueContext, index: str, first_minute: int, last_minute: int
) -> list[tuple[str, float]]:
    """The summed bucket fields as (field, value) pairs."""
    flat = [
        _s(v) for v in await send(ctx, usage_summary_call(index, first_minute, last_minute)) or []
    ]
    return [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)]


def stream_chunk_call(
    keys: QueueKeys, job_id: str, stream: str, max_len: int, ttl_ms: int, chunk: bytes
) -> Call:
    """glidemq_streamChunk: append `chunk` to the job's stream `stream`."""
    return STREAM_CHUNK.call([keys.job(job_id), stream], [str(max_len), str(ttl_ms), chunk])


async def stream_chunk(
    ctx: QueueContext, job_id: str, stream: str, max_len: int, ttl_ms: int, chunk: bytes
) -> str | None:
    """The chunk's entry id; None when the job does not exist."""
    reply = await send(ctx, stream_chunk_call(ctx.keys, job_id, stream, max_len, ttl_ms, chunk))
    if not isinstance(reply, bytes | str):
        return None
    return _s(reply)


def suspend_call(
    keys: QueueKeys,
    suspended: str,
    now: int,
    job_id: str,
    entry_id: str,
    reason: str,
    timeout: int,
    emit: str,
) -> Call:
    """glidemq_suspend of a running job into the sorted set `suspended`."""
    return SUSPEND.call(
        [keys.stream, suspended, keys.events],
        [str(now), job_id, entry_id, reason, str(timeout), emit],
    )


async def suspend(
    ctx: QueueContext,
    suspended: str,
    now: int,
    job_id: str,
    entry_id: str,
    reason: str,
    timeout: int,
    emit: str,
) -> str:
    """'suspended', or another state when the worker no longer owns the job."""
    call = suspend_call(ctx.keys, suspended, now, job_id, entry_id, reason, timeout, emit)
    return _s(await send(ctx, call))


def signal_call(
    keys: QueueKeys, suspended: str, now: int, job_id: str, name: str, data: bytes
) -> Call:
    """glidemq_signal: wake a suspended job with the signal `name`."""
    return SIGNAL.call([keys.stream, suspended, keys.events], [str(now), job_id, name, data, "1"])


async def signal(
    ctx: QueueContext, suspended: str, now: int, job_id: str, name: str, data: bytes
) -> str:
    """The job's new state, '0' when it does not exist, or an error code."""
    return _s(await send(ctx, signal_call(ctx.keys, suspended, now, job_id, name, data)))


def expire_suspended_call(keys: QueueKeys, suspended: str, now: int, count: int) -> Call:
    """glidemq_expireSuspended: fail up to `count` suspended jobs whose deadline passed."""
    return EXPIRE_SUSPENDED.call([suspended, keys.events], [str(now), str(count)])


async def expire_suspended(ctx: QueueContext, suspended: str, now: int, count: int) -> int:
    """How many failed."""
    return int(await send(ctx, expire_suspended_call(ctx.keys, suspended, now, count)))


async def claim_serializer(ctx: QueueContext, name: str, who: str) -> None:
    """Check `name` against the serializer recorded for the queue, recording it first when
    none is and it is not JSON. Raises SerializerMismatchError when they differ."""
    meta = ctx.keys.meta
    if name != DEFAULT_SERIALIZER and await ctx.command(
        lambda c: c.hsetnx(meta, SERIALIZER_FIELD, name)
    ):
        await ctx.confirm_writes("the queue's serializer")
    raw = await ctx.command(lambda c: c.hget(meta, SERIALIZER_FIELD))
    recorded = DEFAULT_SERIALIZER if raw is None else raw.decode()
    if recorded != name:
        raise SerializerMismatchError(ctx.name, recorded, name, who)
