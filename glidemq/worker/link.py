"""What one Worker's helpers share: who it is on the server, its clients, its slots.

The fetcher, the maintenance loops, the watchdog, the batch runner, the limit helpers and the
jobs a worker runs get a `WorkerLink` instead of the Worker: the consumer name and keys, the
options, the clients and the QueueContext (replaced by the watchdog), the event emitter, the
`Slots`, the pacers, and whether the worker is closing or paused.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import GlideMQError
from ..options.limits import limiter_args
from ..types import retention_args
from .report import WorkerReport

if TYPE_CHECKING:
    from ..client.connection import Client, ConnectionOptions
    from ..client.context import QueueContext
    from ..emitter import Emitter
    from ..job.job import Job
    from ..keys import QueueKeys
    from ..options.usage import TokenLimiter
    from ..timing.pacer import Pacer
    from ..types import WorkerOptions
    from .lifecycle import WorkerLifecycle
    from .slots import Slots

__all__ = ["WorkerLink"]

log = logging.getLogger("glidemq.worker")


class WorkerLink:
    """The shared state of one Worker (see the module doc). `fail_now` is how a running job
    fails itself (`Job.move_to_failed`)."""

    __slots__ = (
        "_faults",
        "_state",
        "blocking",
        "client",
        "connection",
        "consumer",
        "ctx",
        "emit_flag",
        "events",
        "fail_now",
        "global_pacer",
        "keep_fail",
        "keys",
        "limiter",
        "name",
        "opts",
        "pacer",
        "report",
        "slots",
    )

    def __init__(
        self,
        state: WorkerLifecycle,
        *,
        name: str,
        keys: QueueKeys,
        consumer: str,
        opts: WorkerOptions,
        connection: ConnectionOptions,
        events: Emitter,
        slots: Slots[Job[Any, Any]],
        fail_now: Callable[[Job[Any, Any], BaseException], Awaitable[None]],
        pacer: Pacer | None,
    ) -> None:
        self._state = state
        self._faults: set[str] = set()
        self.name = name
        """The queue's name."""
        self.keys = keys
        self.consumer = consumer
        """The worker's consumer name in the stream's group."""
        self.opts = opts
        self.connection = connection
        self.events = events
        self.slots = slots
        self.fail_now = fail_now
        self.emit_flag = "1" if opts.events else "0"
        self.keep_fail = retention_args(opts.remove_on_fail)
        self.limiter = limiter_args(opts)  # passed with every fetch
        self.pacer = pacer
        self.global_pacer: Pacer | None = None  # set from the queue's meta
        self.client: Client | None = None
        self.blocking: Client | None = None
        self.ctx: QueueContext | None = None
        self.report = WorkerReport(name, consumer, connection.where)
        """The worker's log lines (failures, the connection, stall recovery)."""

    @property
    def token_limiter(self) -> TokenLimiter | None:
        """The worker's `token_limiter` option (jobs read it when they report usage)."""
        return self.opts.token_limiter

    def running_now(self, most: int = 20) -> list[str]:
        """Ids of up to `most` jobs this worker is running (not those it only holds)."""
        held = {job.id for _, job in self.slots.held_jobs()}
        return [job.id for _, job in self.slots.jobs() if job.id not in held][:most]

    @property
    def finished_counts(self) -> tuple[int, int]:
        """(completed, failed) of this worker since it was made."""
        return self._state.completed_count, self._state.failed_count

    @property
    def closing(self) -> bool:
        """Whether the worker's close has begun (re-read after every await)."""
        return self._state.is_closing()

    @property
    def paused(self) -> bool:
        """Whether the worker is paused (`Worker.pause`)."""
        return self._state.is_paused()

    def fault(self, exc: Exception, where: str) -> None:
        """A background loop's step (`where`) failed and the loop goes on: the `error`
        event, and for what is not a GlideMQError (a fault of ours, not the server's) the
        traceback on the `glidemq.worker` logger the first time it happens there."""
        if not isinstance(exc, GlideMQError) and where not in self._faults:
            self._faults.add(where)
            log.error("glidemq: queue %s: %s failed; it goes on", self.name, where, exc_info=exc)
        self.events.emit("error", exc)

    def context(self) -> QueueContext:
        """The worker's QueueContext; GlideMQError before the worker has started."""
        ctx = self.ctx
        if ctx is None:
            raise GlideMQError("the worker is not started")
        return ctx
