"""Finding jobs by what a person remembers of them: the id, part of the name, or a piece of
text in the data. Bounded: an id is one read; names and data text are matched on the server
among the first `scan` jobs of each state (one call per state for each), however large the
queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ValidationError
from ..job.job import Job
from ..keys import validate_job_id
from ..queue.queries import SEARCH_STATES
from .model import JobPage, JobRow
from .queries import search_pattern
from .view import QueueView

__all__ = ["DEFAULT_SCAN", "find_jobs"]

DEFAULT_SCAN = 1000


async def find_jobs(
    view: QueueView,
    text: str,
    states: Sequence[str] = (),
    *,
    limit: int = 20,
    offset: int = 0,
    scan: int = DEFAULT_SCAN,
) -> JobPage:
    """Jobs in `states` (default: every searchable state) whose id is `text`, whose name
    contains it (or matches it, for a glob), or whose data's JSON text contains it (ASCII
    case ignored): the id match first, then name matches, then data matches, each job once."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("search", "must be non-empty text")
    chosen = tuple(dict.fromkeys(states)) or SEARCH_STATES
    for state in chosen:
        if state not in SEARCH_STATES:
            raise ValidationError(
                "state", f"cannot search {state!r} jobs; one of {', '.join(SEARCH_STATES)}"
            )
    for label, value, low in (("limit", limit, 1), ("offset", offset, 0), ("scan", scan, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValidationError(label, f"must be an integer >= {low}")
    text = text.strip()
    want = offset + limit + 1
    found: dict[str, Job[Any, Any]] = {}
    try:
        job_id = validate_job_id(text, "search")
    except ValidationError:
        job_id = None
    if job_id is not None:
        fields = await view.ctx.get_fields(job_id)
        if fields is not None:
            job: Job[Any, Any] = Job(view.ctx, fields)
            dead = job.state == "failed" and fields.get(b"deadLetter") == b"1"
            if ("dead_letter" if dead else job.state) in chosen:
                found[job.id] = job
    if len(found) < want:
        named = await view.search_jobs(
            search_pattern(text), state=list(chosen), limit=want, scan=scan
        )
        for job in named:
            found.setdefault(job.id, job)
    if len(found) < want:
        matched = await view.search_jobs(state=list(chosen), text=text, limit=want, scan=scan)
        for job in matched:
            found.setdefault(job.id, job)
    jobs = list(found.values())
    rows = [JobRow.of(j) for j in jobs[offset : offset + limit]]
    return JobPage(view.name, chosen, text, offset, limit, None, len(jobs) > offset + limit, rows)
