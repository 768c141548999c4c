"""Noticing connections that went silent, and replacing their clients.

valkey-glide reconnects by itself when a connection breaks (a reset, a server restart, a
failover), but not when it goes silent: a connection whose packets vanish (a black-holed
route, a dropped NAT entry) only times out, call after call, forever. So:

- `Renewal` (glidemq.client.renewal) replaces a Queue's client once its calls have been timing out
  for longer than one request time-out and a fresh connection to the server answers;
- `Watchdog` does the same for a Worker's two clients, and also when its fetch loop made no
  progress for `block_timeout + request_timeout + slack` while it had free slots (the
  blocking read neither returned nor timed out), then restarts the fetch loop.

A reply lost on the way (a time-out, a dropped connection) may have carried jobs: the server
delivered them to this worker, which never heard of them. Once calls succeed again, the
watchdog hands such entries straight back to the queue (`hand_back_unknown`) instead of
leaving them to stall recovery, which would wait `lock_duration`.

Creating a valkey-glide client blocks the event loop until the connection is made, so a new
client is only made after `probe` saw the server answer on a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from glide import Batch, ClusterBatch, GlideClusterClient, IdBound, StreamPendingOptions
from glide import MaxId as _MaxId
from glide import MinId as _MinId

from ..client.connection import Client, close_client, create_client
from ..client.renewal import SLACK, Renewal, close_later, probe, queue_renewal
from ..errors import ConnectionError, GlideMQError
from ..wire import fetch

if TYPE_CHECKING:
    from ..client.context import QueueContext
    from .fetcher import Fetcher
    from .link import WorkerLink

__all__ = ["Renewal", "Watchdog", "hand_back_unknown", "probe", "queue_renewal"]

log = logging.getLogger("glidemq.worker.watchdog")


class Watchdog:
    """Keeps one Worker fetching: see the module doc. `renewals` counts client swaps.
    It watches `fetcher`'s progress and calls `restart_fetch()` after swapping the clients
    in `link`."""

    def __init__(
        self,
        link: WorkerLink,
        fetcher: Fetcher,
        restart_fetch: Callable[[], Awaitable[None]],
    ) -> None:
        self.link = link
        self.fetcher = fetcher
        self.restart_fetch = restart_fetch
        opts = link.connection
        self.bound = (link.opts.block_timeout + opts.request_timeout_ms) / 1000 + SLACK
        # Only tracks: a swap from inside a call could cancel the very task making it.
        self.renewal = Renewal(opts, None)
        self.renewals = 0
        self.handed_back = 0
        self.last_renewal = float("-inf")
        # last transport failure, last successful call, last hand-back of unknown entries
        self.dirty_at = self.ok_at = self.reconciled_at = float("-inf")
        self._closing: set[asyncio.Task[None]] = set()  # closing replaced clients
        self._hand_backs: set[asyncio.Task[None]] = set()

    def attach(self, ctx: QueueContext) -> None:
        ctx.on_success = self._call_ok
        ctx.on_transport_failure = self._call_failed
        # A closing worker tries each call once more, not for the whole retry budget.
        ctx.keep_trying = self.stopping_not

    def _call_ok(self) -> None:
        self.ok_at = time.monotonic()
        self.renewal.failing_since = None
        if self.link.report.failing_since is not None:
            self.link.report.connection_restored()

    async def _call_failed(self, error: BaseException) -> None:
        self.dirty_at = time.monotonic()
        self.link.report.connection_lost(f"{type(error).__name__}: {error}")
        await self.renewal.failed(error)

    def start(self) -> asyncio.Task[None]:
        """Start watching; the worker cancels the task when it closes."""
        loop = asyncio.get_running_loop()
        return loop.create_task(self.run(), name=f"glidemq-watchdog-{self.link.name}")

    def stopping(self) -> bool:
        """Whether the worker is closing (re-read after every await)."""
        return self.link.closing

    def stopping_not(self) -> bool:
        return not self.link.closing

    def fetch_stuck_for(self) -> float:
        """Seconds the fetch loop has wanted jobs without a successful round trip."""
        fetcher = self.fetcher
        if not fetcher.wants:
            return 0.0
        return time.monotonic() - fetcher.progress_at

    async def run(self) -> None:
        try:
            await self._watch()
        finally:
            for task in list(self._hand_backs):
                task.cancel()

    async def _watch(self) -> None:
        w = self.link
        interval = min(1.0, self.bound / 4)
        settle = w.connection.request_timeout_ms / 1000
        while not w.closing:
            await asyncio.sleep(interval)
            dirty = max(self.dirty_at, self.fetcher.error_at)
            now = time.monotonic()
            if self.reconciled_at < dirty < self.ok_at and now - dirty >= settle:
                self.reconciled_at = now
                # In the background: this loop must keep watching while the calls run.
                task = asyncio.get_running_loop().create_task(self._hand_back())
                self._hand_backs.add(task)
                task.add_done_callback(self._hand_backs.discard)
            stuck = self.fetch_stuck_for()
            if stuck < self.bound and not self.renewal.stale():
                continue
            if time.monotonic() - self.last_renewal < self.bound:
                continue  # the last new clients get a full period to show progress
            if not await probe(w.connection):
                continue  # the server is gone: nothing a new client could do yet
            self.last_renewal = time.monotonic()
            w.events.emit(
                "error",
                ConnectionError(
                    f"no progress for {max(stuck, self.bound):.1f} s on a reachable server: "
                    "reconnecting"
                ),
            )
            with contextlib.suppress(GlideMQError):
                await self.renew_clients()

    async def _hand_back(self) -> None:
        try:
            self.handed_back += await hand_back_unknown(self.link)
        except GlideMQError as exc:
            self.link.events.emit("error", exc)

    async def renew_clients(self) -> None:
        """Connect new command and blocking clients, swap them in, restart the fetch loop,
        and close the old clients in the background."""
        w = self.link
        if w.closing or w.ctx is None:
            return
        name = f"glidemq-{w.consumer}"
        client = await create_client(w.connection, name=name)
        try:
            blocking = await create_client(w.connection, name=f"{name}-b")
        except BaseException:
            await close_client(client)
            raise
        if self.stopping():  # close() began meanwhile: it owns the old clients
            await close_later([client, blocking], self._closing)
            return
        old = [w.client, w.blocking]
        w.client, w.blocking, w.ctx.client = client, blocking, client
        await self.restart_fetch()  # the loop may hang in a read on the old blocking client
        self.renewals += 1
        self.renewal.failing_since = None
        self.dirty_at = time.monotonic()  # replies lost on the old clients: reconcile soon
        log.warning("glidemq: worker %s reconnected (renewal %d)", w.consumer, self.renewals)
        await close_later(old, self._closing)


async def hand_back_unknown(link: WorkerLink) -> int:
    """Hand back to the queue the entries the server delivered to this worker that it does
    not hold (their reply was lost); returns how many jobs went back."""
    w = link
    ctx = w.ctx
    held = w.slots.holds
    if ctx is None:
        return 0
    stream = w.keys.stream
    # Idle for a request time-out at least: a reply still on its way would have timed out.
    options = StreamPendingOptions(
        min_idle_time_ms=w.connection.request_timeout_ms, consumer_name=w.consumer
    )
    pending = await ctx.command(
        lambda c: c.xpending_range(stream, "workers", _MinId(), _MaxId(), 1000, options)
    )
    entry_ids = [_text(p[0]) for p in pending or [] if not held(_text(p[0]))]
    if not entry_ids:
        return 0

    async def read_entries(client: Client) -> Any:
        cluster = isinstance(client, GlideClusterClient)
        batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
        for entry_id in entry_ids:
            batch.xrange(stream, IdBound(entry_id), IdBound(entry_id), 1)
        return await client.exec(batch, False)  # type: ignore[arg-type,unused-ignore]

    replies = await ctx.command(read_entries)
    args: list[str | bytes] = [w.consumer]
    for entry_id, reply in zip(entry_ids, replies or [], strict=False):
        if held(entry_id):  # started meanwhile by a reply that did arrive
            continue
        fields: list[Any] = next(iter(reply.values()), []) if isinstance(reply, dict) else []
        job_id = next((_text(v) for k, v in fields if k == b"id"), "")
        args += [entry_id, job_id]  # no job id: the entry is only acknowledged
    if len(args) == 1:
        return 0
    back = await fetch.defer_active(ctx, w.consumer, args[1:], stream=stream)
    if back:
        log.warning(
            "glidemq: worker %s handed back %s job(s) whose reply was lost", w.consumer, back
        )
    return int(back)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
