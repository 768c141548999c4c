"""A parent job's view of its children, for `Job`'s flow methods: what completed children
returned, how failed ones failed, and waiting for the pending ones."""

from __future__ import annotations

from typing import Any

from ..client.context import QueueContext
from ..encoding.serialize import decode_json
from ..errors import JobNotFoundError, JobStateError, UnrecoverableError, WaitingChildrenError
from ..wire import flows
from .flowview import parse_ref

__all__ = [
    "child_key",
    "children_failures",
    "children_values",
    "ignored_failures",
    "move_to_waiting_children",
]


def child_key(ref: bytes) -> str:
    """'glide:{images}:42' -> 'images:42'."""
    text = ref.decode(errors="replace")
    parsed = parse_ref(text)
    return f"{parsed[0]}:{parsed[1]}" if parsed else text


async def children_values(ctx: QueueContext, job_id: str) -> dict[str, Any]:
    """Return values of the job's completed children, by `"<queue>:<id>"`."""
    fields = await ctx.get_fields(job_id)
    if fields is None:
        raise JobNotFoundError(ctx.name, job_id)
    return {child_key(k[3:]): decode_json(v) for k, v in fields.items() if k.startswith(b"cv:")}


async def children_failures(ctx: QueueContext, job_id: str) -> dict[str, str]:
    """Failure reasons recorded for the job's children, by `"<queue>:<id>"`: those whose
    failure it ignored or continued after, and the one that failed it (if one did)."""
    fields = await ctx.get_fields(job_id)
    if fields is None:
        raise JobNotFoundError(ctx.name, job_id)
    return _failures(fields, with_culprit=True)


async def ignored_failures(ctx: QueueContext, job_id: str) -> dict[str, str]:
    """Failure reasons of children whose failure the job ignored (or continued after), by
    `"<queue>:<id>"`: not the one that failed it."""
    fields = await ctx.get_fields(job_id)
    if fields is None:
        raise JobNotFoundError(ctx.name, job_id)
    return _failures(fields, with_culprit=False)


def _failures(fields: dict[bytes, bytes], with_culprit: bool) -> dict[str, str]:
    culprit = None if with_culprit else fields.get(b"failedBy")
    return {
        child_key(k[3:]): v.decode(errors="replace")
        for k, v in fields.items()
        if k.startswith(b"cf:") and k[3:] != culprit
    }


async def move_to_waiting_children(
    ctx: QueueContext, job_id: str, entry_id: str | None, running: bool
) -> None:
    """See `Job.move_to_waiting_children` (`running`: a worker runs the job; the job records
    the move when this raises WaitingChildrenError)."""
    if entry_id is None or not running:
        raise JobStateError(
            job_id, "move to waiting-children", "only a running job can wait for children"
        )
    status, detail = await flows.move_to_waiting_children(
        ctx, ctx.keys, job_id, entry_id, ctx.now_ms()
    )
    if status == "continue":
        return
    if status == "failed":
        raise UnrecoverableError(detail)
    if status != "waiting-children":
        raise JobStateError(job_id, "move to waiting-children", "the worker no longer owns it")
    raise WaitingChildrenError(f"job {job_id} waits for its children")
