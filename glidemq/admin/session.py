"""Admin: one connection to a server, every admin query and action as a method.

    async with Admin("valkey://127.0.0.1:6379") as admin:
        for q in await admin.queues():
            print(q.name, q.counts.failed)
        page = await admin.jobs("emails", ["failed"], limit=20)
        await admin.retry("emails", [row.id for row in page.jobs])

The `glidemq` command is a thin formatter over this class; other faces use it the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

from ..client.connection import Client, ConnectionLike, resolve_connection
from ..client.context import QueueContext
from ..client.lazy import LazyClient
from ..errors import JobNotFoundError, QueueNotFoundError
from ..events import QueueEvent, QueueEvents
from ..keys import DEFAULT_PREFIX, QueueKeys, validate_prefix
from ..queue.groups import GroupInfo
from ..queue.schedulers import JobScheduler
from . import actions, queries, search
from .model import ActionResult, BulkResult, JobDetail, JobPage, QueueStatus, QueueSummary
from .view import QueueView

__all__ = ["Admin"]

_SUMMARY_AT_ONCE = 16  # queues summarized concurrently by `queues()`
# Views kept for reuse; callers of a web face choose the names, so the table is bounded.
_VIEWS_KEPT = 1024


class Admin:
    """Read and act on the queues of one server (`connection`: options, a URL, or None for
    `GLIDEMQ_URL`), under one key `prefix`. Connects on first use; `async with` or
    `close()`. Methods naming a queue raise `QueueNotFoundError` when it has no key."""

    def __init__(self, connection: ConnectionLike = None, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.connection = resolve_connection(connection)
        self.prefix = validate_prefix(prefix)
        self._conn = LazyClient(self.connection, "glidemq-admin", "admin connection")
        self._views: dict[str, QueueView] = {}

    async def __aenter__(self) -> Self:
        await self._connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _connect(self) -> Client:
        return await self._conn.get()

    async def close(self) -> None:
        """Close the connection. Idempotent."""
        self._views.clear()
        await self._conn.close()

    async def view(self, name: str, *, must_exist: bool = True) -> QueueView:
        """The queue `name` on this connection (QueueNotFoundError if it has no key and
        `must_exist`)."""
        view = self._views.get(name)
        if view is None:
            client = await self._connect()
            keys = QueueKeys(name, self.prefix)
            view = QueueView(
                QueueContext(
                    client,
                    keys,
                    retry=self.connection.retry,
                    clock=self.connection.clock,
                    durability=self.connection.confirmation,
                    request_timeout_ms=self.connection.request_timeout_ms,
                    where=self.connection.where,
                )
            )
            if len(self._views) >= _VIEWS_KEPT:
                del self._views[next(iter(self._views))]  # the oldest: views hold no resource
            self._views[name] = view
        if must_exist and not await view.exists():
            raise QueueNotFoundError(name, self.prefix)
        return view

    # -- queries -----------------------------------------------------------------------------

    async def queue_names(self) -> list[str]:
        """Names of every queue under the prefix, sorted."""
        return await queries.queue_names(await self._connect(), self.prefix)

    async def queues(self) -> list[QueueSummary]:
        """Every queue under the prefix with its counts, paused flag and live workers."""
        names = await self.queue_names()
        gate = asyncio.Semaphore(_SUMMARY_AT_ONCE)

        async def one(name: str) -> QueueSummary:
            async with gate:
                return await queries.queue_summary(await self.view(name, must_exist=False))

        return list(await asyncio.gather(*(one(n) for n in names)))

    async def status(self, queue: str) -> QueueStatus:
        """Counts, workers, per-minute throughput, limits, schedulers of one queue."""
        return await queries.queue_status(await self.view(queue))

    async def jobs(
        self,
        queue: str,
        states: Sequence[str] = (),
        *,
        limit: int = 20,
        offset: int = 0,
        search: str | None = None,
    ) -> JobPage:
        """A page of the queue's jobs in `states` (default all); `search`: names matching a
        glob or containing the text."""
        view = await self.view(queue)
        return await queries.job_page(view, states, limit=limit, offset=offset, search=search)

    async def job(self, queue: str, job_id: str, *, log_lines: int = 100) -> JobDetail:
        """Everything about one job (JobNotFoundError if there is none)."""
        detail = await queries.job_detail(await self.view(queue), job_id, log_lines=log_lines)
        if detail is None:
            raise JobNotFoundError(queue, job_id)
        return detail

    async def find(
        self,
        queue: str,
        text: str,
        states: Sequence[str] = (),
        *,
        limit: int = 20,
        offset: int = 0,
        scan: int = search.DEFAULT_SCAN,
    ) -> JobPage:
        """Jobs whose id is `text`, whose name contains it or whose data text contains it,
        looking at no more than `scan` jobs per state (`glidemq.admin.search`)."""
        view = await self.view(queue)
        return await search.find_jobs(view, text, states, limit=limit, offset=offset, scan=scan)

    async def schedulers(self, queue: str) -> list[JobScheduler]:
        """The queue's job schedulers, the next to run first."""
        return await queries.schedulers(await self.view(queue))

    async def events(self, queue: str, count: int = 20) -> list[QueueEvent]:
        """The queue's last `count` events, oldest first."""
        return await queries.recent_events(await self.view(queue), count)

    def follow(self, queue: str) -> QueueEvents:
        """A live feed of the queue's events from now on (on a blocking client of its own;
        use it with `async with` / `async for`)."""
        QueueKeys(queue, self.prefix)  # a bad name fails here, not in the reader
        return QueueEvents(queue, connection=self.connection, prefix=self.prefix)

    # -- actions -----------------------------------------------------------------------------

    async def retry(self, queue: str, ids: Sequence[str]) -> list[ActionResult]:
        """Send finished jobs back to waiting, one result per id."""
        return await actions.retry(await self.view(queue), ids)

    async def retry_state(self, queue: str, state: str, limit: int | None = None) -> BulkResult:
        """Send the jobs in `state` (failed, dead_letter, completed) back to waiting."""
        return await actions.retry_state(await self.view(queue), state, limit)

    async def remove(self, queue: str, ids: Sequence[str]) -> list[ActionResult]:
        """Delete jobs that are not running, one result per id."""
        return await actions.remove(await self.view(queue), ids)

    async def promote(self, queue: str, ids: Sequence[str]) -> list[ActionResult]:
        """Make delayed jobs runnable now, one result per id."""
        return await actions.promote(await self.view(queue), ids)

    async def revoke(self, queue: str, ids: Sequence[str]) -> list[ActionResult]:
        """Cancel jobs (running ones at their worker's next heartbeat), one result per id."""
        return await actions.revoke(await self.view(queue), ids)

    async def add_job(self, queue: str, name: str, data: Any, opts: Any = None) -> ActionResult:
        """Add one job to `queue` (which need not exist yet)."""
        view = await self.view(queue, must_exist=False)
        return await actions.add_job(view, self.connection, name, data, opts)

    async def update_data(self, queue: str, job_id: str, data: Any) -> ActionResult:
        """Replace the data of a job no worker has taken yet (refused once one fetched it)."""
        return await actions.update_data(await self.view(queue), job_id, data)

    async def change_priority(self, queue: str, job_id: str, priority: int) -> ActionResult:
        """Give a job that has not started yet a new priority."""
        return await actions.change_priority(await self.view(queue), job_id, priority)

    async def change_delay(self, queue: str, job_id: str, delay: int) -> ActionResult:
        """Run a delayed job `delay` ms from now instead."""
        return await actions.change_delay(await self.view(queue), job_id, delay)

    async def pause(self, queue: str) -> BulkResult:
        """Stop workers from taking new jobs of the queue."""
        return await actions.pause(await self.view(queue))

    async def resume(self, queue: str) -> BulkResult:
        """Let workers take the queue's jobs again."""
        return await actions.resume(await self.view(queue))

    async def groups(self, queue: str, limit: int | None = None) -> list[GroupInfo]:
        """The queue's groups (`Queue.get_groups`), at most `limit` of them."""
        return await (await self.view(queue)).get_groups(limit)

    async def group(self, queue: str, key: str) -> GroupInfo | None:
        """One group of the queue (`Queue.get_group`); None when the queue has no group by
        that key (no jobs, no settings)."""
        return await (await self.view(queue)).get_group(key)

    async def pause_group(self, queue: str, key: str) -> GroupInfo | None:
        """Stop the group's jobs from starting; the group as it is now."""
        view = await self.view(queue)
        await view.pause_group(key)
        return await view.get_group(key)

    async def resume_group(self, queue: str, key: str) -> GroupInfo | None:
        """Let the group's jobs start again; the group as it is now."""
        view = await self.view(queue)
        await view.resume_group(key)
        return await view.get_group(key)

    async def clean(
        self, queue: str, state: str, grace_ms: int, limit: int | None = None
    ) -> BulkResult:
        """Remove jobs in `state` older than `grace_ms`."""
        return await actions.clean(await self.view(queue), state, grace_ms, limit)

    async def drain(self, queue: str, delayed: bool = False) -> BulkResult:
        """Remove every job waiting to run (and delayed ones with `delayed`)."""
        return await actions.drain(await self.view(queue), delayed)

    async def obliterate(self, queue: str, force: bool = False) -> BulkResult:
        """Delete the queue and every job in it (refused while jobs run unless `force`)."""
        return await actions.obliterate(await self.view(queue), force)
