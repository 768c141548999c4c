"""Single-job operations (remove, revoke, change priority or delay, promote, replace data,
update, log, retry) and queue-wide ones (pause, resume, drain, clean, obliterate, counts, listings,
search, broadcast trim)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..client.context import QueueContext
from ..errors import JobNotFoundError, JobStateError, ServerError, ValidationError
from ..keys import QueueKeys
from . import codes
from .layout import Call, Layout, Sender, layout, send

__all__ = [
    "BACKLOG",
    "BC_TRIM",
    "CHANGE_DELAY",
    "CHANGE_PRIORITY",
    "CLEAN",
    "DRAIN",
    "GET_COUNTS",
    "GET_JOB_IDS",
    "LOG",
    "OBLITERATE",
    "PAUSE",
    "PROMOTE_JOB",
    "REMOVE_JOB",
    "RESUME",
    "RETRY_JOBS",
    "REVOKE",
    "SEARCH_BY_NAME",
    "UPDATE_DATA",
    "UPDATE_JOB",
    "backlog",
    "backlog_call",
    "bc_trim",
    "bc_trim_call",
    "change_delay",
    "change_priority",
    "clean",
    "clean_call",
    "drain",
    "drain_call",
    "get_counts",
    "get_counts_call",
    "get_job_ids",
    "get_job_ids_call",
    "job_op_call",
    "log",
    "log_call",
    "obliterate",
    "obliterate_call",
    "pause",
    "pause_call",
    "promote_job",
    "remove_job",
    "resume",
    "resume_call",
    "retry_jobs",
    "retry_jobs_call",
    "revoke",
    "search_by_name",
    "search_by_name_call",
    "update_data",
    "update_data_call",
    "update_job",
    "update_job_call",
]

REMOVE_JOB = layout("glidemq_removeJob", keys="3", args="1")
REVOKE = layout("glidemq_revoke", keys="3", args="2")
CHANGE_PRIORITY = layout("glidemq_changePriority", keys="3", args="3")
CHANGE_DELAY = layout("glidemq_changeDelay", keys="3", args="3")
PROMOTE_JOB = layout("glidemq_promoteJob", keys="3", args="2")
UPDATE_DATA = layout("glidemq_updateData", keys="3", args="4", safe=True)
UPDATE_JOB = layout("glidemq_updateJob", keys="1", args="4..", safe=True)
LOG = layout("glidemq_log", keys="2", args="1..")
RETRY_JOBS = layout("glidemq_retryJobs", keys="3", args="3..")
PAUSE = layout("glidemq_pause", keys="2", args="0", safe=True)
RESUME = layout("glidemq_resume", keys="2", args="0", safe=True)
DRAIN = layout("glidemq_drain", keys="3", args="3")
CLEAN = layout("glidemq_clean", keys="3", args="3")
OBLITERATE = layout("glidemq_obliterate", keys="2", args="2", safe=True)
GET_COUNTS = layout("glidemq_getCounts", keys="2", args="0", safe=True)
BACKLOG = layout("glidemq_backlog", keys="2", args="1", safe=True)
GET_JOB_IDS = layout("glidemq_getJobIds", keys="2", args="3", safe=True)
SEARCH_BY_NAME = layout("glidemq_searchByName", keys="2", args="4..", safe=True)
BC_TRIM = layout("glidemq_bcTrim", keys="1", args="0")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else "" if value is None else str(value)


def _op_keys(k: QueueKeys) -> list[str]:
    return [k.stream, k.scheduled, k.events]


# -- single jobs ---------------------------------------------------------------------------


def job_op_call(op: Layout, keys: QueueKeys, job_id: str, *args: str | bytes) -> Call:
    """A single-job function (remove, revoke, change priority or delay, promote) of `job_id`
    with the rest of its arguments."""
    return op.call(_op_keys(keys), [job_id, *args])


async def _job_op(ctx: QueueContext, op: Layout, job_id: str, *args: str, what: str) -> str:
    """Run a single-job function: the job's state after it, or its refusal as a typed error."""
    reply = _s(await send(ctx, job_op_call(op, ctx.keys, job_id, *args)))
    if reply == "0":
        raise JobNotFoundError(ctx.name, job_id)
    if reply == codes.ACTIVE:
        raise JobStateError(job_id, what, "it is running; revoke it or wait for it to finish")
    if reply == codes.STATE:
        raise JobStateError(job_id, what, "not possible in its current state")
    if reply == codes.FINISHED:
        raise JobStateError(job_id, what, "it already finished")
    if reply == codes.BAD_OPTION:  # "change priority" -> field "priority"
        raise ValidationError(what.rsplit(" ", 1)[-1], "rejected by the server")
    if codes.is_error(reply):
        raise ServerError(f"{op.name}: {reply}")
    return reply


async def remove_job(ctx: QueueContext, job_id: str) -> None:
    """Delete a job that is not running."""
    await _job_op(ctx, REMOVE_JOB, job_id, what="remove")


async def revoke(ctx: QueueContext, job_id: str, now: int) -> str:
    """'revoked' (failed at once) or 'flagged' (its worker aborts it)."""
    return await _job_op(ctx, REVOKE, job_id, str(now), what="revoke")


async def change_priority(ctx: QueueContext, job_id: str, priority: int, now: int) -> str:
    """The job's state afterwards."""
    return await _job_op(
        ctx, CHANGE_PRIORITY, job_id, str(priority), str(now), what="change priority"
    )


async def change_delay(ctx: QueueContext, job_id: str, delay: int, now: int) -> str:
    """The job's state afterwards."""
    return await _job_op(ctx, CHANGE_DELAY, job_id, str(delay), str(now), what="change delay")


async def promote_job(ctx: QueueContext, job_id: str, now: int) -> str:
    """The job's state afterwards."""
    return await _job_op(ctx, PROMOTE_JOB, job_id, str(now), what="promote")


def update_data_call(
    keys: QueueKeys, job_id: str, data: str | bytes, entry_id: str = "", consumer: str = ""
) -> Call:
    """glidemq_updateData: replace the job's data if its state allows it, in the same call.
    `entry_id` and `consumer`: those of the run replacing its own job's data ('' from
    outside a run)."""
    return job_op_call(UPDATE_DATA, keys, job_id, data, entry_id, consumer)


async def update_data(
    ctx: QueueContext, job_id: str, data: str | bytes, entry_id: str = "", consumer: str = ""
) -> str:
    """Replace the data of a job no worker has taken (from outside a run), or of the run's
    own job (`entry_id`, `consumer`); the job's state. JobStateError says why it was refused:
    a worker fetched it (running or held), it finished, or the run no longer holds it."""
    reply = _s(await send(ctx, update_data_call(ctx.keys, job_id, data, entry_id, consumer)))
    if reply == "0":
        raise JobNotFoundError(ctx.name, job_id)
    if reply == codes.ACTIVE:
        raise JobStateError(
            job_id,
            "update data",
            "a worker has fetched it (running or held); only jobs no worker has taken can "
            "be edited",
        )
    if reply == codes.FINISHED:
        raise JobStateError(job_id, "update data", "it already finished")
    if reply == codes.STALE:
        raise JobStateError(job_id, "update data", "this run no longer holds the job")
    if reply == codes.STATE:
        raise JobStateError(job_id, "update data", "not possible in its current state")
    if codes.is_error(reply):
        raise ServerError(f"{UPDATE_DATA.name}: {reply}")
    return reply


def update_job_call(
    keys: QueueKeys, job_id: str, fields: Sequence[tuple[str, str | bytes]]
) -> Call:
    """glidemq_updateJob: set fields of an existing job."""
    args: list[str | bytes] = [job_id, "1"]
    for name, value in fields:
        args += [name, value]
    return UPDATE_JOB.call([keys.events], args)


async def update_job(
    ctx: QueueContext, job_id: str, fields: Sequence[tuple[str, str | bytes]]
) -> None:
    """Set fields of an existing job; a `progress` field also emits a progress event."""
    if await send(ctx, update_job_call(ctx.keys, job_id, fields)) == 0:
        raise JobNotFoundError(ctx.name, job_id)


def log_call(keys: QueueKeys, job_id: str, lines: Sequence[str]) -> Call:
    """glidemq_log: append lines to the job's log. Not resent after an ambiguous failure."""
    return LOG.call([keys.job(job_id), keys.log(job_id)], list(lines))


async def log(ctx: QueueContext, job_id: str, lines: Sequence[str]) -> int:
    """The log's length afterwards."""
    n = await send(ctx, log_call(ctx.keys, job_id, lines))
    if n == 0:
        raise JobNotFoundError(ctx.name, job_id)
    return int(n)


def retry_jobs_call(
    keys: QueueKeys, now: int, source: str, count: int, ids: Sequence[str] = ()
) -> Call:
    """glidemq_retryJobs: send up to `count` finished jobs of `source` (or exactly `ids`)
    back to waiting."""
    return RETRY_JOBS.call(_op_keys(keys), [str(now), source, str(count), *ids])


async def retry_jobs(
    ctx: QueueContext, now: int, source: str, count: int, ids: Sequence[str] = ()
) -> int:
    """How many jobs went back."""
    return int(await send(ctx, retry_jobs_call(ctx.keys, now, source, count, ids)))


# -- the whole queue -----------------------------------------------------------------------


def pause_call(keys: QueueKeys) -> Call:
    """glidemq_pause."""
    return PAUSE.call([keys.meta, keys.events], [])


async def pause(ctx: QueueContext) -> None:
    """Workers stop taking jobs of the queue."""
    await send(ctx, pause_call(ctx.keys))


def resume_call(keys: QueueKeys) -> Call:
    """glidemq_resume."""
    return RESUME.call([keys.meta, keys.events], [])


async def resume(ctx: QueueContext) -> None:
    """Workers take jobs of the queue again."""
    await send(ctx, resume_call(ctx.keys))


def drain_call(keys: QueueKeys, cursor: str, count: int, delayed: bool) -> Call:
    """glidemq_drain: one step of removing the waiting (and delayed) jobs."""
    return DRAIN.call(_op_keys(keys), [cursor, str(count), "1" if delayed else "0"])


async def drain(ctx: QueueContext, cursor: str, count: int, delayed: bool) -> tuple[int, str]:
    """(jobs removed, the next cursor; '0' when done)."""
    r = await send(ctx, drain_call(ctx.keys, cursor, count, delayed))
    return int(r[0]), _s(r[1])


def clean_call(keys: QueueKeys, state: str, before: int, limit: int) -> Call:
    """glidemq_clean: remove up to `limit` jobs in `state` (wire name) older than `before`."""
    return CLEAN.call(_op_keys(keys), [state, str(before), str(limit)])


async def clean(ctx: QueueContext, state: str, before: int, limit: int) -> list[str]:
    """Ids of the removed jobs."""
    return [_s(x) for x in await send(ctx, clean_call(ctx.keys, state, before, limit))]


def obliterate_call(keys: QueueKeys, cursor: str, force: bool) -> Call:
    """glidemq_obliterate: one step of deleting the queue."""
    return OBLITERATE.call([keys.stream, keys.meta], [cursor, "1" if force else "0"])


async def obliterate(ctx: QueueContext, cursor: str, force: bool) -> str:
    """The next cursor ('0' when done), or 'ERR:ACTIVE' when jobs run and not `force`."""
    return _s(await send(ctx, obliterate_call(ctx.keys, cursor, force)))


def get_counts_call(keys: QueueKeys) -> Call:
    """glidemq_getCounts."""
    return GET_COUNTS.call([keys.stream, keys.scheduled], [])


async def get_counts(ctx: QueueContext) -> list[int]:
    """waiting, active, delayed, prioritized, completed, failed, dead letter, paused (0/1),
    waiting-children, group-waiting, rate-limited."""
    return [int(x) for x in await send(ctx, get_counts_call(ctx.keys))]


def backlog_call(keys: QueueKeys, now: int) -> Call:
    """glidemq_backlog at `now` (ms)."""
    return BACKLOG.call([keys.stream, keys.scheduled], [str(now)])


async def backlog(ctx: QueueContext, now: int) -> list[int]:
    """waiting, prioritized, due, grouped, active, oldest ready time (ms, -1: none), delayed
    (not due), paused (0/1), as of `now`."""
    return [int(x) for x in await send(ctx, backlog_call(ctx.keys, now))]


def get_job_ids_call(keys: QueueKeys, state: str, start: int, end: int) -> Call:
    """glidemq_getJobIds of `state` (wire name), `start..end` inclusive."""
    return GET_JOB_IDS.call([keys.stream, keys.scheduled], [state, str(start), str(end)])


async def get_job_ids(ctx: QueueContext, state: str, start: int, end: int) -> list[str]:
    """The ids in that range."""
    return [_s(x) for x in await send(ctx, get_job_ids_call(ctx.keys, state, start, end))]


def search_by_name_call(
    keys: QueueKeys, state: str, pattern: bytes, limit: int, scan: int, filters: Sequence[str]
) -> Call:
    """glidemq_searchByName in `state` (wire name): names matching the Lua `pattern` ('':
    any), data matching `filters` (field, kind, value triples), at most `limit` ids after
    looking at `scan` jobs."""
    return SEARCH_BY_NAME.call(
        [keys.stream, keys.scheduled], [state, pattern, str(limit), str(scan), *filters]
    )


async def search_by_name(
    ctx: QueueContext,
    state: str,
    pattern: bytes,
    limit: int,
    scan: int,
    filters: Sequence[str],
) -> list[str]:
    """The ids found."""
    call = search_by_name_call(ctx.keys, state, pattern, limit, scan, filters)
    return [_s(x) for x in await send(ctx, call)]


def bc_trim_call(stream: str) -> Call:
    """glidemq_bcTrim of a broadcast stream."""
    return BC_TRIM.call([stream], [])


async def bc_trim(sender: Sender, stream: str) -> int:
    """How many messages every subscription was done with and were deleted."""
    return int(await send(sender, bc_trim_call(stream)))
