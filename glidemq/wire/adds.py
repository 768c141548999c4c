"""Adding jobs: glidemq_add, glidemq_addJob, glidemq_addBulk, glidemq_dedup and the job
schedulers' glidemq_setScheduler and glidemq_fireScheduler.

The positional addJob arguments (docs/WIRE_PROTOCOL.md: 17 documented, an 18th for LIFO)
are built by `job_args` alone; glidemq_dedup and glidemq_fireScheduler take the same
arguments after their own, and glidemq_addBulk's compact runs are built by `bulk_job` and
`pack_bulk`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import CostExceedsCapacityError, GroupFullError, QueueFullError, ServerError
from ..keys import QueueKeys
from ..options.limits import PLAIN_EXT, addjob_limit_args, compact_limit_args
from ..types import JobOptions
from . import codes
from .layout import Call, layout

__all__ = [
    "ADD",
    "ADD_BULK",
    "ADD_JOB",
    "DEDUP",
    "FIRE_SCHEDULER",
    "SET_SCHEDULER",
    "add_bulk_call",
    "add_call",
    "add_job_call",
    "added_id",
    "bulk_header",
    "bulk_job",
    "dedup_call",
    "fire_scheduler_call",
    "is_plain",
    "job_args",
    "pack_bulk",
    "set_scheduler_call",
]

ADD = layout("glidemq_add", keys="1", args="5")
ADD_JOB = layout("glidemq_addJob", keys="4", args="17..18")
ADD_BULK = layout("glidemq_addBulk", keys="4", args="1..")
DEDUP = layout("glidemq_dedup", keys="5", args="20..21", safe=True)


def job_args(
    name: str | bytes,
    data: str | bytes,
    opts_json: str | bytes,
    now: int | str,
    opts: JobOptions,
    job_id: str | bytes | None,
) -> list[str | bytes]:
    """addJob's 17 documented arguments and the 18th (LIFO) for one job; `opts` gives the
    delay, priority, attempts, ttl and limit settings, `opts_json` the stored options."""
    *limits, lifo = addjob_limit_args(opts)
    return [
        name,
        data,
        opts_json,
        str(now),
        str(opts.delay),
        str(opts.priority),
        "",  # parentId: only flows set it, through glidemq_addTree
        str(opts.attempts),
        *limits,
        str(opts.ttl),
        job_id or "",
        lifo,
    ]


def is_plain(opts: JobOptions) -> bool:
    """Whether a job with these options can be added by glidemq_add: no delay, priority,
    ttl, custom id, group, ordering key or LIFO (deduplication is the caller's check)."""
    return (
        not opts.delay
        and not opts.priority
        and not opts.ttl
        and opts.job_id is None
        and compact_limit_args(opts) == PLAIN_EXT
    )


def add_call(
    keys: QueueKeys, now: int, name: str, opts_json: bytes, data: str | bytes, attempts: int | str
) -> Call:
    """glidemq_add of one job whose options are `is_plain`; the reply is one addJob reply.
    Never safe to resend: it has no custom id to find it by."""
    return ADD.call([keys.id], [str(now), name, opts_json, data, str(attempts)], False)


def add_job_call(keys: QueueKeys, args: list[str | bytes]) -> Call:
    """glidemq_addJob of one job given as `job_args`; safe to resend only with a custom id."""
    return ADD_JOB.call([keys.id, keys.stream, keys.scheduled, keys.events], args, bool(args[16]))


def bulk_header(opts_json: bytes, opts: JobOptions) -> tuple[str | bytes, ...]:
    """A job's run header in a bulk add, after its name: 7 items, or 15 with limit options."""
    return (
        opts_json,
        str(opts.delay),
        str(opts.priority),
        str(opts.attempts),
        str(opts.ttl),
        opts.job_id or "",
        *compact_limit_args(opts),
    )


def bulk_job(name: str, header: Sequence[str | bytes], data: str | bytes) -> list[str | bytes]:
    """One job for `pack_bulk`: its name, its `bulk_header`, then its encoded data."""
    return [name, *header, data]


def pack_bulk(now: int, jobs: Iterable[Sequence[str | bytes]]) -> list[str | bytes]:
    """glidemq_addBulk's arguments for jobs given as `bulk_job`: neighbours with the same
    header and no custom id share one run, so a bulk of like jobs costs one argument per
    job."""
    args: list[str | bytes] = [str(now)]
    head: Sequence[str | bytes] = ()
    count_at = n = 0
    for job in jobs:
        header = job[:-1]
        if n and not header[6] and header == head:
            n += 1
        else:
            if n:
                args[count_at] = str(n)
            count_at, head, n = len(args), header, 1
            args.append("")
            args.extend(header)
        args.append(job[-1])
    if n:
        args[count_at] = str(n)
    return args


def add_bulk_call(
    keys: QueueKeys, now: int, jobs: Sequence[Sequence[str | bytes]], *, safe: bool = False
) -> Call:
    """glidemq_addBulk of `jobs` (each a `bulk_job`); the reply has one addJob reply per job.
    `safe`: every job carries a custom id, so a resend finds them and adds nothing."""
    return ADD_BULK.call(
        [keys.id, keys.stream, keys.scheduled, keys.events], pack_bulk(now, jobs), safe
    )


def dedup_call(
    keys: QueueKeys, dedup_id: str, ttl: int, mode: str, args: list[str | bytes]
) -> Call:
    """glidemq_dedup: add the job given as `job_args` unless its deduplication id is taken."""
    return DEDUP.call(
        [keys.dedup, keys.id, keys.stream, keys.scheduled, keys.events],
        [dedup_id, str(ttl), mode, *args],
    )


def added_id(reply: Any, queue: str, opts: JobOptions) -> str | None:
    """The id of the job an add wrote, None when a custom or deduplication id skipped it;
    the server's refusals as typed errors."""
    job_id = reply.decode() if isinstance(reply, bytes) else str(reply)
    if job_id in ("duplicate", "skipped"):
        return None
    if not codes.is_error(job_id):
        return job_id
    refusal = codes.input_refusal(job_id, queue)
    if refusal is not None:
        raise refusal
    if job_id == codes.COST_EXCEEDS_CAPACITY:
        bucket = opts.token_bucket
        raise CostExceedsCapacityError(opts.cost or 1.0, bucket.capacity if bucket else 0)
    if job_id == codes.KEY_FULL:
        key = opts.ordering_key if opts.ordering_key is not None else opts.group_key
        raise GroupFullError(queue, key or "")
    if job_id == codes.QUEUE_FULL:
        raise QueueFullError(queue)
    raise ServerError(f"add: {job_id}")


def written_ids(replies: Iterable[Any]) -> list[str]:
    """The ids of the jobs these add replies (one per job) say were written: no duplicate,
    no refusal, no reply that is not one."""
    out = []
    for reply in replies:
        if not isinstance(reply, bytes | str):
            continue
        job_id = reply.decode() if isinstance(reply, bytes) else reply
        if job_id not in ("duplicate", "skipped") and not codes.is_error(job_id):
            out.append(job_id)
    return out


# -- job schedulers: the stored entry and its job in one call -----------------------------------

SET_SCHEDULER = layout("glidemq_setScheduler", keys="1", args="3", safe=True)
FIRE_SCHEDULER = layout("glidemq_fireScheduler", keys="5", args="20..21", safe=True)


def set_scheduler_call(key: str, name: str, old_sha1: str, entry: bytes) -> Call:
    """glidemq_setScheduler: store `entry` (b'': delete) if the stored one still hashes to
    `old_sha1` ('' : none stored); replies 1 when written."""
    return SET_SCHEDULER.call([key], [name, old_sha1, entry])


def fire_scheduler_call(
    key: str, keys: QueueKeys, name: str, old_sha1: str, entry: bytes, args: list[str | bytes]
) -> Call:
    """glidemq_fireScheduler: store `entry` and add the run's job (given as `job_args`) if the
    stored entry still hashes to `old_sha1`; replies [status, addJob reply]."""
    return FIRE_SCHEDULER.call(
        [key, keys.id, keys.stream, keys.scheduled, keys.events], [name, old_sha1, entry, *args]
    )
