"""The admin layer's state changes: retry, remove, promote and revoke jobs by id; edit a job's
data, priority or delay; retry, clean and drain by state; pause, resume and obliterate a
queue. Each runs the `Queue` / `Job` method (one FCALL per state change; an edit checks the
job's state in that same call, never before it) and reports what happened as `ActionResult` /
`BulkResult`; a job that cannot take the action is reported, not raised."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..client.connection import ConnectionOptions
from ..encoding.serialize import encode_data
from ..errors import JobNotFoundError, JobStateError, ValidationError
from ..job.checks import check_delay, check_priority
from ..keys import validate_job_id
from ..types import JobOptions
from ..wire import ops
from .model import ActionResult, BulkResult
from .view import QueueView

__all__ = [
    "CLEAN_STATES",
    "EDITABLE_STATES",
    "RETRY_STATES",
    "add_job",
    "change_delay",
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

EDITABLE_STATES = (
    "waiting",
    "delayed",
    "prioritized",
    "group-waiting",
    "rate-limited",
    "waiting-children",
    "suspended",
)
"""States whose jobs' data may be replaced: no worker has the job and it has not finished
(the library's glidemq_updateData checks it in the call that writes)."""

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
        try:
            state = await ops.promote_job(view.ctx, job_id, view.ctx.now_ms())
        except JobNotFoundError:
            out.append(ActionResult(view.name, "promote", job_id, False, "not found"))
        except JobStateError:
            detail = await _refused(view, job_id, "only delayed jobs can be promoted")
            out.append(ActionResult(view.name, "promote", job_id, False, detail))
        else:
            out.append(ActionResult(view.name, "promote", job_id, True, f"now {state}"))
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


async def _refused(view: QueueView, job_id: str, rule: str) -> str:
    """Why the server refused to act on a job: its state (read after the refusal, for the
    message only: the refusal itself came from the state in the call that would have
    written) and the rule."""
    state = await view.ctx.get_state(job_id)
    if state is None:
        return "not found"
    if state == "active":
        return f"a worker has fetched it (running or held); {rule}"
    return f"it is {state}; {rule}"


async def update_data(view: QueueView, job_id: str, data: Any) -> ActionResult:
    """Replace the data of a job no worker has taken yet (waiting, delayed, prioritized,
    parked by its group or flow); a job a worker fetched (running or held) or that finished
    is refused, in the same server call that would write (glidemq_updateData)."""
    job_id = validate_job_id(job_id, "id")
    ctx = view.ctx
    raw = encode_data(data, compress=ctx.compress, serializer=ctx.serializer)
    try:
        state = await ops.update_data(ctx, job_id, raw)
    except JobNotFoundError:
        return ActionResult(view.name, "update-data", job_id, False, "not found")
    except JobStateError:
        detail = await _refused(view, job_id, "only jobs no worker has taken can be edited")
        return ActionResult(view.name, "update-data", job_id, False, detail)
    return ActionResult(view.name, "update-data", job_id, True, f"data replaced while {state}")


async def change_priority(view: QueueView, job_id: str, priority: int) -> ActionResult:
    """Give a job that has not started yet a new priority (0: none; lower runs first);
    the state is checked in the call that changes it."""
    job_id = validate_job_id(job_id, "id")
    check_priority(priority)
    try:
        state = await ops.change_priority(view.ctx, job_id, priority, view.ctx.now_ms())
    except JobNotFoundError:
        return ActionResult(view.name, "priority", job_id, False, "not found")
    except JobStateError:
        rule = "only waiting, prioritized and delayed jobs can be re-prioritized"
        return ActionResult(
            view.name, "priority", job_id, False, await _refused(view, job_id, rule)
        )
    return ActionResult(view.name, "priority", job_id, True, f"priority {priority}, {state}")


async def change_delay(view: QueueView, job_id: str, delay: int) -> ActionResult:
    """Run a delayed job `delay` ms from now instead; the state is checked in the call that
    changes it."""
    job_id = validate_job_id(job_id, "id")
    check_delay(delay)
    try:
        state = await ops.change_delay(view.ctx, job_id, delay, view.ctx.now_ms())
    except JobNotFoundError:
        return ActionResult(view.name, "delay", job_id, False, "not found")
    except JobStateError:
        rule = "only delayed jobs can be given a new delay"
        return ActionResult(view.name, "delay", job_id, False, await _refused(view, job_id, rule))
    return ActionResult(view.name, "delay", job_id, True, f"delay {delay}, {state}")


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
