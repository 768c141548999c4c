"""The admin layer's state changes: retry, remove, promote and revoke jobs by id; retry, clean and
drain by state; pause, resume and obliterate a queue. Each runs the `Queue` / `Job` method
(one FCALL per state change) and reports what happened as `ActionResult` / `BulkResult`; a
job that cannot take the action is reported, not raised."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..client.connection import ConnectionOptions
from ..errors import JobNotFoundError, JobStateError, ValidationError
from ..keys import validate_job_id
from ..types import JobOptions
from .model import ActionResult, BulkResult
from .view import QueueView

__all__ = [
    "CLEAN_STATES",
    "RETRY_STATES",
    "add_job",
    "change_priority",
    "clean",
    "drain",
    "obliterate",
    "pause",
    "promote",
    "remove",
    "resume",
    "retry",
    "retry_state",
    "revoke",
    "update_data",
]

EDITABLE_STATES = ("waiting", "delayed", "prioritized", "waiting-children")
"""States whose jobs' data may be replaced: they have not started."""

RETRY_STATES = ("failed", "dead_letter", "completed")
CLEAN_STATES = ("completed", "failed", "dead_letter", "waiting", "delayed", "prioritized")
_CHUNK = 1000  # jobs per FCALL of the bulk actions


def _ids(ids: Sequence[str]) -> list[str]:
    if not ids:
        raise ValidationError("ids", "name at least one job id")
    return [validate_job_id(i, "id") for i in dict.fromkeys(ids)]


async def retry(view: QueueView, ids: Sequence[str]) -> list[ActionResult]:
    """Send finished jobs (failed, dead-lettered or completed) back to waiting with fresh
    attempts."""
    out = []
    for job_id in _ids(ids):
        fields = await view.ctx.get_fields(job_id)
        if fields is None:
            out.append(ActionResult(view.name, "retry", job_id, False, "not found"))
            continue
        state = fields.get(b"state", b"").decode()
        if state == "failed" and fields.get(b"deadLetter") == b"1":
            state = "dead_letter"
        if state not in RETRY_STATES:
            detail = f"it is {state}; only failed, dead-letter and completed jobs can be retried"
            out.append(ActionResult(view.name, "retry", job_id, False, detail))
            continue
        job = await view.get_job(job_id)
        try:
            if job is None:
                raise JobNotFoundError(view.name, job_id)
            await job.retry(state)
        except (JobNotFoundError, JobStateError) as exc:
            out.append(ActionResult(view.name, "retry", job_id, False, str(exc)))
        else:
            out.append(ActionResult(view.name, "retry", job_id, True, f"was {state}"))
    return out


async def retry_state(view: QueueView, state: str, limit: int | None = None) -> BulkResult:
    """Send up to `limit` (default: all there are now) jobs in `state` (failed, dead_letter
    or completed) back to waiting, oldest first, in calls of 1000."""
    if state not in RETRY_STATES:
        raise ValidationError("state", f"must be one of {', '.join(RETRY_STATES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValidationError("limit", "must be an integer >= 1")  # as clean says
    counts = await view.get_job_counts()
    there = {"failed": counts.failed, "dead_letter": counts.dead_letter}.get(
        state, counts.completed
    )
    goal = there if limit is None else min(limit, there)
    done = 0
    while done < goal:
        moved = await view.retry_jobs(min(_CHUNK, goal - done), state)
        done += moved
        if moved == 0:
            break
    return BulkResult(view.name, "retry", done)


async def remove(view: QueueView, ids: Sequence[str]) -> list[ActionResult]:
    """Delete jobs that are not running."""
    out = []
    for job_id in _ids(ids):
        try:
            await view.remove(job_id)
        except (JobNotFoundError, JobStateError) as exc:
            detail = "not found" if isinstance(exc, JobNotFoundError) else str(exc)
            out.append(ActionResult(view.name, "remove", job_id, False, detail))
        else:
            out.append(ActionResult(view.name, "remove", job_id, True))
    return out


async def promote(view: QueueView, ids: Sequence[str]) -> list[ActionResult]:
    """Make delayed jobs runnable now."""
    out = []
    for job_id in _ids(ids):
        job = await view.get_job(job_id)
        if job is None:
            out.append(ActionResult(view.name, "promote", job_id, False, "not found"))
            continue
        if job.state != "delayed":
            detail = f"it is {job.state}; only delayed jobs can be promoted"
            out.append(ActionResult(view.name, "promote", job_id, False, detail))
            continue
        try:
            await job.promote()
        except (JobNotFoundError, JobStateError) as exc:
            out.append(ActionResult(view.name, "promote", job_id, False, str(exc)))
        else:
            out.append(ActionResult(view.name, "promote", job_id, True, f"now {job.state}"))
    return out


async def revoke(view: QueueView, ids: Sequence[str]) -> list[ActionResult]:
    """Cancel jobs: one not started yet fails at once ('revoked'); a running one is flagged
    and its worker stops it at its next heartbeat ('flagged'). Finished jobs are reported."""
    out = []
    for job_id in _ids(ids):
        try:
            outcome = await view.revoke(job_id)
        except (JobNotFoundError, JobStateError) as exc:
            detail = "not found" if isinstance(exc, JobNotFoundError) else str(exc)
            out.append(ActionResult(view.name, "revoke", job_id, False, detail))
        else:
            out.append(ActionResult(view.name, "revoke", job_id, True, outcome))
    return out


async def add_job(
    view: QueueView, connection: ConnectionOptions, name: str, data: Any, opts: Any
) -> ActionResult:
    """Add one job (`opts`: JobOptions names); skipped by a custom id or deduplication is
    reported, not raised."""
    from ..queue.queue import Queue

    if not isinstance(name, str) or not name:
        raise ValidationError("name", "a job needs a name")
    options = JobOptions.coerce(opts)  # unknown or bad options fail before connecting
    queue: Queue[Any, Any] = Queue(view.name, connection=connection, prefix=view.keys.prefix)
    async with queue:
        job = await queue.add(name, data, options)
    if job is None:
        return ActionResult(view.name, "add", options.job_id or "", False, "skipped: id taken")
    return ActionResult(view.name, "add", job.id, True, f"added as {job.state}")


async def update_data(view: QueueView, job_id: str, data: Any) -> ActionResult:
    """Replace the data of a job that has not started."""
    job = await view.get_job(validate_job_id(job_id, "id"))
    if job is None:
        return ActionResult(view.name, "update-data", job_id, False, "not found")
    state = await job.get_state()
    if state not in EDITABLE_STATES:
        detail = f"it is {state}; only jobs that have not started can be edited"
        return ActionResult(view.name, "update-data", job_id, False, detail)
    await job.update_data(data)
    return ActionResult(view.name, "update-data", job_id, True, "data replaced")


async def change_priority(view: QueueView, job_id: str, priority: int) -> ActionResult:
    """Give a job that has not started yet a new priority (0: none; lower runs first)."""
    job_id = validate_job_id(job_id, "id")
    job = await view.get_job(job_id)
    if job is None:
        return ActionResult(view.name, "priority", job_id, False, "not found")
    try:
        await job.change_priority(priority)
    except (JobNotFoundError, JobStateError) as exc:
        return ActionResult(view.name, "priority", job_id, False, str(exc))
    return ActionResult(view.name, "priority", job_id, True, f"priority {priority}, {job.state}")


async def pause(view: QueueView) -> BulkResult:
    """Stop workers from taking new jobs (running jobs finish)."""
    await view.pause()
    return BulkResult(view.name, "pause", 0)


async def resume(view: QueueView) -> BulkResult:
    """Let workers take jobs again."""
    await view.resume()
    return BulkResult(view.name, "resume", 0)


async def clean(view: QueueView, state: str, grace_ms: int, limit: int | None = None) -> BulkResult:
    """Remove up to `limit` (default: all) jobs in `state` older than `grace_ms`: finished
    states by finish time, waiting ones by enqueue time."""
    if state not in CLEAN_STATES:
        raise ValidationError("state", f"must be one of {', '.join(CLEAN_STATES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValidationError("limit", "must be an integer >= 1")
    removed: list[str] = []
    while limit is None or len(removed) < limit:
        want = _CHUNK if limit is None else min(_CHUNK, limit - len(removed))
        ids = await view.clean(grace_ms, want, state)
        removed += ids
        if len(ids) < want:
            break
    return BulkResult(view.name, "clean", len(removed), removed)


async def drain(view: QueueView, delayed: bool = False) -> BulkResult:
    """Remove every job waiting to run (with `delayed`, delayed ones too); running jobs are
    left alone."""
    return BulkResult(view.name, "drain", await view.drain(delayed))


async def obliterate(view: QueueView, force: bool = False) -> BulkResult:
    """Delete the queue and everything in it; refused while jobs run unless `force`."""
    counts = await view.get_job_counts()
    total = sum(counts.as_dict().values())
    await view.obliterate(force)
    return BulkResult(view.name, "obliterate", total)
