"""Inspecting and maintaining a queue: reading jobs, counts, logs and dead letters, pausing,
removing, revoking, retrying, draining, cleaning and obliterating. Part of `Queue`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from glide import Batch, ClusterBatch, GlideClusterClient

from ..client.context import QueueContext
from ..errors import GlideMQError, ValidationError
from ..job.checks import retry_source
from ..job.flowview import DEFAULT_MAX_FLOW_NODES, Flow, read_flow
from ..job.job import Job
from ..wire import codes, ops
from . import queries
from .backlog import Backlog, read_backlog
from .queries import Metrics, WorkerInfo, state_name
from .request import fetch_outcomes

if TYPE_CHECKING:
    from ..keys import QueueKeys

__all__ = ["JOB_STATES", "JobCounts", "QueueAdmin"]

D = TypeVar("D")
R = TypeVar("R")

JOB_STATES = (
    "waiting",
    "active",
    "delayed",
    "prioritized",
    "completed",
    "failed",
    "dead_letter",
    "waiting-children",
    "group-waiting",
    "rate-limited",
)
"""The states `Queue.get_jobs` lists: each job is in exactly one of them."""

# The states JobCounts.as_dict reports; group-waiting and rate-limited jobs are in its
# waiting and delayed counts.
_COUNTED = ("waiting", "active", "delayed", "prioritized", "completed", "failed", "dead_letter")
_CLEANABLE = ("completed", "failed", "dead_letter", "waiting", "delayed", "prioritized")


@dataclass(frozen=True, slots=True)
class JobCounts:
    """How many jobs are in each state.

    `waiting` includes LIFO jobs and the jobs waiting for a slot of their group
    (`group_waiting` of them); `delayed` includes the jobs held back by their group's rate
    limit or token bucket (`rate_limited` of them). `waiting_children` are flow jobs waiting
    for their children, in no other count.
    """

    waiting: int
    active: int
    delayed: int
    prioritized: int
    completed: int
    failed: int
    dead_letter: int
    paused: bool
    waiting_children: int = 0
    group_waiting: int = 0
    rate_limited: int = 0
    suspended: int = 0  # waiting for a signal (docs/AI.md); in no other count, nor in as_dict

    def as_dict(self) -> dict[str, int]:
        """The counts by state name, each job counted once (without `paused` and the
        `group_waiting` / `rate_limited` parts)."""
        out = {s: getattr(self, s) for s in _COUNTED}
        out["waiting_children"] = self.waiting_children
        return out


class QueueAdmin(Generic[D, R]):
    """Reading and maintaining a queue's jobs; part of `Queue`."""

    keys: QueueKeys
    name: str

    async def _context(self) -> QueueContext:  # provided by Queue
        raise NotImplementedError

    # -- reading -----------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> Job[D, R] | None:
        """The job with this id, or None."""
        ctx = await self._context()
        fields = await ctx.get_fields(job_id)
        return None if fields is None else Job(ctx, fields)

    async def get_result(self, job_id: str) -> R | None:
        """A completed job's return value: from its record, or from the result cache
        (`JobOptions.result_ttl`) after the record was removed, until that ttl ends. None
        when the job has not completed (or failed), or neither record nor cache is left."""
        ctx = await self._context()
        outcome = (await fetch_outcomes(ctx, [job_id]))[job_id]
        if outcome is None or outcome.state != "completed":
            return None
        value: R = outcome.value
        return value

    async def get_flow(
        self, job_id: str, *, max_nodes: int = DEFAULT_MAX_FLOW_NODES
    ) -> Flow | None:
        """The flow below this job (pass a root's id for a whole flow): a tree of
        `FlowNode`s with each job's state, result and children, and the same jobs as a DAG
        (`nodes`, `edges`). None when the job does not exist. Reads at most `max_nodes` jobs."""
        return await read_flow(await self._context(), job_id, max_nodes)

    async def _jobs_by_ids(self, ids: Sequence[str]) -> list[Job[D, R]]:
        ctx = await self._context()
        if not ids:
            return []
        cluster = isinstance(ctx.client, GlideClusterClient)
        batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
        for job_id in ids:
            batch.hgetall(self.keys.job(job_id))
        replies = await ctx.command(lambda c: c.exec(batch, False))  # type: ignore[arg-type,unused-ignore]
        return [Job(ctx, h) for h in replies or [] if isinstance(h, dict) and h]

    async def get_jobs(
        self, states: str | Sequence[str] = ("waiting",), start: int = 0, end: int = -1
    ) -> list[Job[D, R]]:
        """Jobs in the given state(s) of `JOB_STATES`, `start..end` inclusive within each.

        Finished states list the newest first; `waiting-children` in the order the jobs
        started to wait; the others in the order they will run.
        """
        wanted = [state_name(s) for s in ([states] if isinstance(states, str) else states)]
        for state in wanted:
            if state not in JOB_STATES:
                raise ValidationError("states", f"unknown state {state!r}; one of {JOB_STATES}")
        ctx = await self._context()
        ids: list[str] = []
        for state in wanted:
            wire = "dlq" if state == "dead_letter" else state
            ids += await ops.get_job_ids(ctx, wire, start, end)
        return await self._jobs_by_ids(ids)

    async def get_job_counts(self) -> JobCounts:
        """Counts of jobs by state, read in one call."""
        ctx = await self._context()
        r = await ops.get_counts(ctx)
        w, a, d, p, c, f, dl = r[:7]
        wc, gw, rl = r[8:11]
        suspended_key = self.keys.base + "suspended"
        su = int(await ctx.command(lambda cl: cl.zcard(suspended_key)))
        return JobCounts(
            w, a, d, p, c, f, dl, paused=bool(r[7]), waiting_children=wc,
            group_waiting=gw, rate_limited=rl, suspended=su,
        )  # fmt: skip

    async def get_backlog(self) -> Backlog:
        """The jobs waiting to start (due delayed jobs included), the running ones and the
        age of the oldest waiting one, read in one call: what an autoscaler reads
        (docs/DEPLOY.md)."""
        return await read_backlog(await self._context())

    async def count(self) -> int:
        """Jobs not yet started: waiting, prioritized and delayed (what `set_max_waiting`
        limits); flow jobs waiting for their children are not counted."""
        c = await self.get_job_counts()
        return c.waiting + c.prioritized + c.delayed

    async def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1
    ) -> tuple[list[str], int]:
        """The job's log lines in `start..end` and the total number of lines."""
        ctx = await self._context()
        key = self.keys.log(job_id)
        lines = await ctx.command(lambda c: c.lrange(key, start, end))
        total = await ctx.command(lambda c: c.llen(key))
        return [x.decode() for x in lines], int(total)

    async def get_dead_letter_jobs(self, start: int = 0, end: int = -1) -> list[Job[D, R]]:
        """Jobs that failed for good while their worker had `dead_letter=True`, newest first."""
        return await self.get_jobs("dead_letter", start, end)

    async def search_jobs(
        self,
        name: str | None = None,
        *,
        state: str | Sequence[str] | None = None,
        data: Mapping[str, Any] | None = None,
        limit: int = 100,
        scan: int = 10_000,
        text: str | None = None,
    ) -> list[Job[D, R]]:
        """Jobs whose name matches the glob `name`, whose data has the given top-level field
        values and whose data's JSON text contains `text` (ASCII case ignored), in `state`
        (one or several; default all), at most `limit`. Looks at no more than `scan` jobs per
        state, on the server (docs/ADVANCED.md, "Queries")."""
        return await queries.search_jobs(
            await self._context(),
            self._jobs_by_ids,
            name=name,
            state=state,
            data=data,
            limit=limit,
            scan=scan,
            text=text,
        )

    async def get_metrics(self, kind: str = "completed", *, minutes: int = 60) -> Metrics:
        """Jobs completed (or failed for good) per minute over the last `minutes` (<= 1440)."""
        ctx = await self._context()
        return await queries.get_metrics(ctx, kind, minutes, ctx.now_ms())

    async def get_workers(self) -> list[WorkerInfo]:
        """The workers serving this queue now (they register on every heartbeat)."""
        ctx = await self._context()
        return await queries.get_workers(ctx, ctx.now_ms())

    # -- control -----------------------------------------------------------------------------

    async def pause(self) -> None:
        """Stop workers from taking new jobs (running jobs finish)."""
        ctx = await self._context()
        await ops.pause(ctx)

    async def resume(self) -> None:
        """Let workers take jobs again."""
        ctx = await self._context()
        await ops.resume(ctx)

    async def is_paused(self) -> bool:
        """Whether the queue is paused."""
        ctx = await self._context()
        meta = self.keys.meta
        return bool(await ctx.command(lambda c: c.hget(meta, "paused")) == b"1")

    async def remove(self, job_id: str) -> None:
        """Delete a job that is not running."""
        ctx = await self._context()
        await ops.remove_job(ctx, job_id)

    async def revoke(self, job_id: str) -> str:
        """Cancel a job: one not started fails at once with reason `revoked` ('revoked');
        a running one is flagged and aborted by its worker ('flagged')."""
        ctx = await self._context()
        return await ops.revoke(ctx, job_id, ctx.now_ms())

    async def retry_jobs(self, count: int = 1000, state: str = "failed") -> int:
        """Send up to `count` failed (or completed, dead_letter) jobs back to waiting."""
        source = retry_source(state)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValidationError("count", "must be a positive integer")
        ctx = await self._context()
        return await ops.retry_jobs(ctx, ctx.now_ms(), source, count)

    async def drain(self, delayed: bool = False) -> int:
        """Remove every job waiting to run (and delayed ones too if `delayed`); running jobs
        are left alone. Returns how many were removed."""
        ctx = await self._context()
        cursor, removed = "-", 0
        while True:
            n, cursor = await ops.drain(ctx, cursor, 1000, delayed)
            removed += n
            if cursor == "0":
                return removed

    async def clean(self, grace: int, limit: int = 1000, state: str = "completed") -> list[str]:
        """Remove up to `limit` jobs in `state` older than `grace` ms; returns their ids.

        States: completed, failed, dead_letter (by finish time); waiting, delayed, prioritized
        (by enqueue time).
        """
        if state not in _CLEANABLE:
            raise ValidationError("state", f"must be one of {_CLEANABLE}")
        for field, value in (("grace", grace), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(field, "must be an integer >= 0")
        ctx = await self._context()
        wire = "dlq" if state == "dead_letter" else state
        return await ops.clean(ctx, wire, ctx.now_ms() - grace, limit)

    async def obliterate(self, force: bool = False) -> None:
        """Delete the queue and every job in it. Refused while jobs run unless `force`."""
        ctx = await self._context()
        cursor = "0"
        first = True
        while first or cursor != "0":
            reply = await ops.obliterate(ctx, cursor, force or not first)
            if reply == codes.ACTIVE:
                raise GlideMQError(
                    f"queue {self.name!r} has running jobs; close the workers or pass force=True"
                )
            cursor, first = reply, False
