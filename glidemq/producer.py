"""Producer: adding jobs and flows from short-lived processes (serverless functions, scripts).

A Producer holds one connection, opened by its first call, and starts no background task, so
nothing runs between calls: a process frozen between two invocations (AWS Lambda and the
like) resumes with nothing half-done. It adds through the same code as `Queue.add`,
`Queue.add_bulk` and `FlowProducer`, with their validation and replies.

Between calls the world may change under it, and the next call copes:

- another event loop (each invocation under `asyncio.run`): a valkey-glide client belongs
  to the loop that made it, so the old one is closed and a new one connected;
- a connection that died while the process was frozen: after `verify_after` seconds without
  a call, a PING (at most `ping_timeout` seconds) checks it first, and a dead one is
  replaced before the add is sent;
- a connection lost *during* an add: see `Producer.add`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

from .client.connection import Client, ConnectionLike, close_client, resolve_connection
from .client.context import QueueContext
from .client.functions import connect_with_library
from .errors import ConnectionError, QueueClosedError, ValidationError
from .flows.flow import FlowJob, FlowProducer, JobNode, JobRef
from .job.job import Job
from .keys import DEFAULT_PREFIX, QueueKeys, validate_prefix
from .options.durability import DurabilityLike
from .queue.queue import Queue
from .queue.request import validate_result_ttl
from .types import JobOptions

if TYPE_CHECKING:
    from .flows.builders import Dag, DagNode

__all__ = ["Producer"]

D = TypeVar("D")
R = TypeVar("R")
T = TypeVar("T")


class _Adds(Queue[Any, Any]):
    """The Queue's add paths on a context the Producer owns; never connects or closes."""

    def __init__(self, producer: Producer[Any, Any], ctx: QueueContext) -> None:
        super().__init__(
            producer.name,
            connection=producer.connection,
            prefix=producer.prefix,
            compression=producer.compression,
            result_ttl=producer.result_ttl,
        )
        self._ctx, self._client = ctx, ctx.client

    async def close(self, timeout: float | None = None) -> None:
        self._closing = self._closed = True


class _Flows(FlowProducer):
    """FlowProducer on the Producer's client and contexts; never connects or closes."""

    def __init__(
        self,
        producer: Producer[Any, Any],
        client: Client,
        context: Callable[[str, Client], QueueContext],
    ) -> None:
        super().__init__(
            connection=producer.connection,
            prefix=producer.prefix,
            compression=producer.compression,
        )
        self._producer = producer
        self._client = client
        self._queue_context = context  # the Producer's context of a queue

    def _ctx(self, client: Client, queue: str) -> QueueContext:
        return self._queue_context(queue, client)

    async def close(self) -> None:
        self._closed = True


class _Link:
    """One connection and what was built on it, valid on one event loop."""

    __slots__ = ("adds", "client", "flows", "loop")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, client: Client, adds: _Adds, flows: _Flows
    ) -> None:
        self.loop = loop
        self.client = client
        self.adds = adds
        self.flows = flows


class Producer(Generic[D, R]):
    """Add jobs to the queue `name`, and flows, with one lazily opened connection.

    `Producer("emails", connection="valkey://host:6379")` makes no connection: the first
    `add`, `add_bulk` or flow call does. Keep one Producer per process (a module global in
    a serverless function) and call `close()` when the process ends, if it ever does.
    `verify_after` (seconds, None: never) and `ping_timeout` govern the check of an idle
    connection described in the module doc. `reconnects` counts connections made after
    the first. Use it from one event loop at a time (it is not thread-safe). `durability`
    overrides the connection's (docs/DURABILITY.md).
    """

    def __init__(
        self,
        name: str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        result_ttl: int | None = None,
        verify_after: float | None = 1.0,
        ping_timeout: float = 1.0,
        durability: DurabilityLike = None,
    ) -> None:
        self.name = name
        self.prefix = validate_prefix(prefix)
        QueueKeys(name, self.prefix)  # a bad queue name fails here, not at the first add
        self.connection = resolve_connection(connection).with_durability(durability)
        self.compression = compression
        self.result_ttl = validate_result_ttl(result_ttl)
        if verify_after is not None and not verify_after >= 0:
            raise ValidationError("verify_after", "must be a number of seconds >= 0, or None")
        if not ping_timeout > 0:
            raise ValidationError("ping_timeout", "must be a number of seconds > 0")
        self.verify_after = verify_after
        self.ping_timeout = ping_timeout
        self.reconnects = 0
        self._link: _Link | None = None
        self._contexts: dict[str, QueueContext] = {}
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._used_at = float("-inf")
        self._connected_once = False
        self._closed = False

    async def __aenter__(self) -> Self:
        return self  # still lazy: the first call connects

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether a connection is open (it may still have died unnoticed)."""
        return self._link is not None

    async def close(self) -> None:
        """Close the connection. Idempotent; the Producer cannot be used afterwards."""
        self._closed = True
        await self._drop()

    # -- adding ------------------------------------------------------------------------------

    async def add(
        self, name: str, data: D | None = None, opts: JobOptions | Mapping[str, Any] | None = None
    ) -> Job[D, R] | None:
        """Add one job, as `Queue.add` does; None when a custom id or deduplication skipped it.

        If the connection is lost while the add is in flight, the add may or may not have
        run. Without a custom `job_id` (or deduplication id) this raises
        `glidemq.ConnectionError` and nothing is retried, so nothing is added twice; the
        caller may retry. With one, the add is retried once the connection is back, and a
        retry by the caller that finds the job returns None: adds with custom ids are
        idempotent. Either way the next call uses a new connection.
        """
        link = await self._open()
        job: Job[D, R] | None = await self._guard(link, link.adds.add(name, data, opts))
        return job

    async def add_bulk(
        self, jobs: Iterable[Mapping[str, Any] | tuple[str, Any] | tuple[str, Any, Any]]
    ) -> list[Job[D, R] | None]:
        """Add many jobs, pipelined, as `Queue.add_bulk` does. A lost connection is reported
        as in `add`; then any part of the jobs may have been added, and only jobs with
        custom ids can be sent again safely."""
        link = await self._open()
        added: list[Job[D, R] | None] = await self._guard(link, link.adds.add_bulk(jobs))
        return added

    async def add_flow(self, flow: FlowJob, *, parent: JobRef | None = None) -> JobNode:
        """Add a flow (a tree of jobs across queues) in one atomic call, as
        `FlowProducer.add` does. A lost connection is reported as in `add`; the flow was
        then added whole or not at all."""
        link = await self._open()
        return await self._guard(link, link.flows.add(flow, parent=parent))

    async def add_dag(
        self, dag: Dag | Iterable[DagNode], *, parent: JobRef | None = None
    ) -> dict[str, Job[Any, Any]]:
        """Add a DAG in one atomic call, as `FlowProducer.add_dag` does."""
        link = await self._open()
        return await self._guard(link, link.flows.add_dag(dag, parent=parent))

    async def add_flows(self, flows: Iterable[FlowJob]) -> list[JobNode | None]:
        """Add independent flows, pipelined, as `FlowProducer.add_bulk` does."""
        link = await self._open()
        return await self._guard(link, link.flows.add_bulk(flows))

    async def add_dependency(
        self, parent: JobRef, child: JobRef
    ) -> Literal["added", "exists", "completed"]:
        """Make an existing job also wait for an existing child, as
        `FlowProducer.add_dependency` does."""
        link = await self._open()
        return await self._guard(link, link.flows.add_dependency(parent, child))

    # -- the connection ----------------------------------------------------------------------

    def _context(self, queue: str, client: Client) -> QueueContext:
        """The context of `queue`, kept across reconnects so that returned Jobs stay usable:
        a new connection is swapped into every context."""
        ctx = self._contexts.get(queue)
        if ctx is None:
            ctx = QueueContext(
                client,
                QueueKeys(queue, self.prefix),
                compress=self.compression,
                retry=self.connection.retry,
                clock=self.connection.clock,
                durability=self.connection.confirmation,
                request_timeout_ms=self.connection.request_timeout_ms,
                where=self.connection.where,
            )
            self._contexts[queue] = ctx
        return ctx

    def _loop_lock(self, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    async def _open(self) -> _Link:
        """The link to use now: connect on first use, on a new event loop, or when an idle
        connection does not answer."""
        if self._closed:
            raise QueueClosedError(self.name, "its producer was closed")
        loop = asyncio.get_running_loop()
        link = self._link
        if link is not None and link.loop is loop and not self._idle():
            return link
        async with self._loop_lock(loop):
            if self._closed:
                raise QueueClosedError(self.name, "its producer was closed")
            link = self._link
            if link is not None and (link.loop is not loop or not await self._answers(link)):
                await self._drop()
                link = None
            if link is None:
                link = await self._connect(loop)
            self._used_at = time.monotonic()
            return link

    def _idle(self) -> bool:
        return self.verify_after is not None and (
            time.monotonic() - self._used_at > self.verify_after
        )

    async def _answers(self, link: _Link) -> bool:
        if not self._idle():
            return True
        try:
            await asyncio.wait_for(link.client.ping(), self.ping_timeout)
        except Exception:  # a time-out or any client error: the connection is not usable
            return False
        return True

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Link:
        # The library is checked on every new connection (one round trip): a server that
        # restarted without persistence in the meantime lost it.
        client = await connect_with_library(self.connection, name=f"glidemq-producer-{self.name}")
        if self._connected_once:
            self.reconnects += 1
        self._connected_once = True
        for ctx in self._contexts.values():
            ctx.client = client
        adds = _Adds(self, self._context(self.name, client))
        self._link = _Link(loop, client, adds, _Flows(self, client, self._context))
        return self._link

    async def _drop(self, only: _Link | None = None) -> None:
        """Close the current link (only if it is `only`, when given)."""
        link = self._link
        if only is not None and link is not only:
            return  # another call already replaced it
        self._link = None
        if link is not None:
            # valkey-glide closes without awaiting the loop, so a client of a finished loop
            # can be closed from a new one.
            with contextlib.suppress(Exception):
                await close_client(link.client)

    async def _guard(self, link: _Link, call: Awaitable[T]) -> T:
        """Await an add; after a lost connection, drop it so the next call connects anew."""
        try:
            result = await call
        except ConnectionError:
            await self._drop(link)
            raise
        self._used_at = time.monotonic()
        return result
