"""Shared subscribers behind the proxy's event streams.

However many streams follow one queue, its events (`/queues/{q}/events`) or its jobs'
output (`/queues/{q}/jobs/{id}/stream`), one `QueueFeed` reads for all of them on one
blocking connection: one XREAD over the queue's events key and the stream key of every
followed job (they share the queue's hash tag, so one read serves a cluster too). Events go
into each listener's buffer. For a job's output the feed only wakes the followers: each
reads its own chunks after its own position on the proxy's command connection, so a stream
resumed at any `Last-Event-ID` needs no bookkeeping here, and no wake-up can be lost (a
follower registers before it reads, and reads again whenever it is woken).

The streams of one broadcast subscription with one subject filter share one
`BroadcastWorker`; each message goes to one of them, as when each stream was a consumer of
its own. A feed opens with its first stream and closes with its last; how many streams are
open at once is the proxy's `StreamGate`'s business.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any

from glide import MaxId, MinId, StreamReadOptions

from ..admin.session import Admin
from ..broadcast.broadcast import BroadcastWorker
from ..client.connection import Client, ConnectionOptions, close_client, create_client
from ..client.context import QueueContext
from ..client.renewal import Renewal
from ..errors import GlideMQError
from ..events import QueueEvent, parse_event
from ..job.job import Job
from ..job.streams import MISSING_GRACE_MS, StreamChunk, read_chunks, stream_key
from ..keys import QueueKeys

__all__ = ["BroadcastFeed", "Feeds", "Listener", "QueueFeed", "Watch"]

log = logging.getLogger("glidemq.proxy")

BLOCK_MS = 1000
"""Longest wait of a feed's read; a follower checks its job's state this often."""
_EVENTS_BUFFER = 1000  # unread events kept per listener; the oldest go past it
_ARMING_POLL_S = 0.05  # a new follower's poll until the feed's read covers its job
_READ_COUNT = 500
_BROADCAST_BUFFER = 1000  # broadcast messages held for slow clients
_FINISHED = (b"completed", b"failed")
_PROBLEM_EVERY_S = 60.0


class Listener:
    """One queue-events stream: a bounded buffer of the events the feed read for it."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[QueueEvent] = asyncio.Queue(_EVENTS_BUFFER)
        self.dropped = 0
        """Events dropped because the client read too slowly."""

    def put(self, ev: QueueEvent) -> None:
        if self.inbox.full():
            self.inbox.get_nowait()
            self.dropped += 1
        self.inbox.put_nowait(ev)


class Watch:
    """One follower of a job's output: `woken` is set when new chunks may be there;
    `armed` once the feed's read covers the job (before that the follower polls)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.woken = asyncio.Event()
        self.armed = False


class QueueFeed:
    """One blocking reader for the streams of queue `name` (see the module doc)."""

    def __init__(self, feeds: Feeds, name: str) -> None:
        self.feeds = feeds
        self.name = name
        self.keys = QueueKeys(name, feeds.prefix)
        self.users = 0
        self.listeners: set[Listener] = set()
        self.events_at: str | None = None
        self.watches: dict[str, set[Watch]] = {}
        self.positions: dict[str, str] = {}
        self.client: Client | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._problem_at = float("-inf")

    async def open(self) -> None:
        connection = self.feeds.connection
        self.client = await create_client(connection, name=f"glidemq-proxy-feed-{self.name}")
        self._task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"glidemq-proxy-feed-{self.name}"
        )

    async def close(self) -> None:
        client, self.client = self.client, None
        task, self._task = self._task, None
        await close_client(client)  # ends a blocking read in progress
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # -- listeners and followers -----------------------------------------------------------

    async def listen(self) -> Listener:
        """A new listener of the queue's events from now on."""
        if self.events_at is None:
            view = await self.feeds.admin.view(self.name, must_exist=False)
            key = self.keys.events
            last = await view.ctx.command(lambda c: c.xrevrange(key, MaxId(), MinId(), 1))
            if self.events_at is None:  # another listener may have pinned it meanwhile
                self.events_at = next(iter(last)).decode() if last else "0-0"
        listener = Listener()
        self.listeners.add(listener)
        self._changed.set()
        return listener

    def unlisten(self, listener: Listener) -> None:
        self.listeners.discard(listener)
        if not self.listeners:
            self.events_at = None

    def watch(self, job_id: str) -> Watch:
        """Register a follower of the job's output (before its first read)."""
        watch = Watch(stream_key(self.keys, job_id))
        self.watches.setdefault(watch.key, set()).add(watch)
        return watch

    def seen(self, watch: Watch, last: str) -> None:
        """The follower read up to `last`: the feed's read starts there for a new job."""
        if watch.key not in self.positions:
            self.positions[watch.key] = last
            self._changed.set()

    def unwatch(self, watch: Watch) -> None:
        followers = self.watches.get(watch.key)
        if followers is None:
            return
        followers.discard(watch)
        if not followers:
            del self.watches[watch.key]
            self.positions.pop(watch.key, None)

    def idle(self) -> bool:
        return not self.listeners and not self.watches

    # -- the read ------------------------------------------------------------------------------

    async def _renew(self) -> None:
        connection = self.feeds.connection
        try:
            client = await create_client(connection, name=f"glidemq-proxy-feed-{self.name}")
        except GlideMQError:
            return
        if self.client is None:
            await close_client(client)
            return
        old, self.client = self.client, client
        await close_client(old)

    def _closed(self) -> bool:
        return self.client is None

    def _streams(self) -> dict[str, str]:
        streams: dict[str, str] = {}
        if self.listeners and self.events_at is not None:
            streams[self.keys.events] = self.events_at
        for key in self.watches:
            at = self.positions.get(key)
            if at is not None:
                streams[key] = at
        return streams

    async def _read_loop(self) -> None:
        backoff = 0.05
        renewal = Renewal(self.feeds.connection, self._renew)
        renewal.stale_after += BLOCK_MS / 1000
        while self.client is not None:
            streams = self._streams()
            if not streams:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                reply = await self.client.xread(
                    streams, StreamReadOptions(block_ms=BLOCK_MS, count=_READ_COUNT)
                )
                backoff = 0.05
                renewal.ok()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._closed():
                    return
                self._problem(exc)
                await renewal.failed()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for key in streams:
                for watch in self.watches.get(key, ()):
                    watch.armed = True
            for raw_key, entries in (reply or {}).items():
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                if not entries:
                    continue
                if key == self.keys.events:
                    self._deliver(entries)
                else:
                    last: Any = list(entries)[-1]
                    self.positions[key] = last.decode() if isinstance(last, bytes) else str(last)
                    for watch in self.watches.get(key, ()):
                        watch.woken.set()

    def _deliver(self, entries: Mapping[bytes, Any]) -> None:
        for entry_id, pairs in entries.items():
            ev = parse_event(entry_id, pairs)
            if self.events_at is not None:
                self.events_at = ev.id
            for listener in self.listeners:
                listener.put(ev)

    def _problem(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._problem_at >= _PROBLEM_EVERY_S:
            self._problem_at = now
            log.warning("glidemq: proxy: reading the streams of queue %s: %s", self.name, exc)


class BroadcastFeed:
    """One `BroadcastWorker` shared by the streams of one subscription and filter."""

    def __init__(self, worker: BroadcastWorker[Any, Any], inbox: asyncio.Queue[Job[Any, Any]]):
        self.worker = worker
        self.inbox = inbox
        self.users = 0
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()


_BroadcastKey = tuple[str, str, tuple[str, ...] | None]


class Feeds:
    """The proxy's feeds, one per queue and one per broadcast subscription with streams."""

    def __init__(self, connection: ConnectionOptions, prefix: str, admin: Admin) -> None:
        self.connection = connection
        self.prefix = prefix
        self.admin = admin
        self.queues: dict[str, QueueFeed] = {}
        self.broadcasts: dict[_BroadcastKey, BroadcastFeed] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self.queues) + len(self.broadcasts)

    async def queue(self, name: str) -> QueueFeed:
        """The feed of queue `name`, opened if needed; give it back with `release`."""
        feed = self.queues.get(name)
        if feed is None:
            feed = self.queues[name] = QueueFeed(self, name)
            feed.users += 1
            try:
                await feed.open()
            except BaseException as exc:
                self.queues.pop(name, None)
                feed.ready.set_exception(exc)
                feed.ready.exception()  # read here: no "never retrieved" warning
                raise
            feed.ready.set_result(None)
            return feed
        feed.users += 1
        try:
            await asyncio.shield(feed.ready)
        except BaseException:
            feed.users -= 1
            raise
        return feed

    def release(self, feed: QueueFeed) -> None:
        """One stream less on `feed`; the last one closes it (without awaiting)."""
        feed.users -= 1
        if feed.users <= 0 and self.queues.get(feed.name) is feed:
            del self.queues[feed.name]
            self._later(feed.close())

    async def broadcast(
        self, name: str, subscription: str, subjects: list[str] | None
    ) -> BroadcastFeed:
        """The shared worker of `subscription` of broadcast `name` with this filter."""
        key: _BroadcastKey = (name, subscription, tuple(subjects) if subjects else None)
        feed = self.broadcasts.get(key)
        if feed is not None:
            feed.users += 1
            try:
                await asyncio.shield(feed.ready)
            except BaseException:
                feed.users -= 1
                raise
            return feed
        inbox: asyncio.Queue[Job[Any, Any]] = asyncio.Queue(_BROADCAST_BUFFER)

        async def deliver(job: Job[Any, Any]) -> None:
            await inbox.put(job)  # waits (the message stays active) while clients are behind

        worker: BroadcastWorker[Any, Any] = BroadcastWorker(  # checks every name first
            name,
            subscription,
            deliver,
            connection=self.connection,
            prefix=self.prefix,
            subjects=subjects or None,
            job_options={"remove_on_complete": True},
        )
        feed = self.broadcasts[key] = BroadcastFeed(worker, inbox)
        feed.users += 1
        try:
            await worker.start()
        except BaseException as exc:
            self.broadcasts.pop(key, None)
            feed.ready.set_exception(exc)
            feed.ready.exception()
            self._later(worker.close(force=True))
            raise
        feed.ready.set_result(None)
        return feed

    def release_broadcast(self, feed: BroadcastFeed) -> None:
        """One stream less on `feed`; the last one closes its worker."""
        feed.users -= 1
        if feed.users > 0:
            return
        for key, open_feed in list(self.broadcasts.items()):
            if open_feed is feed:
                del self.broadcasts[key]
        self._later(feed.worker.close(force=True))

    def _later(self, close: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(close)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every feed. Idempotent."""
        queues, self.queues = list(self.queues.values()), {}
        broadcasts, self.broadcasts = list(self.broadcasts.values()), {}
        await asyncio.gather(
            *(f.close() for f in queues),
            *(f.worker.close(force=True) for f in broadcasts),
            *list(self._closing),
            return_exceptions=True,
        )


async def _read_after(ctx: QueueContext, key: str, last: str) -> list[StreamChunk]:
    chunks: list[StreamChunk] = await ctx.command(lambda c: read_chunks(c, key, last, None))
    return chunks


async def follow_chunks(
    feed: QueueFeed, watch: Watch, job_id: str, last: str | None
) -> AsyncIterator[StreamChunk]:
    """The chunks of job `job_id` after `last` (None: from the first kept), as they come,
    until the job finished and every chunk was read (or it was gone for
    `MISSING_GRACE_MS`). Reads on the proxy's command connection; `feed` wakes it through
    `watch` (from `feed.watch(job_id)`, made before the first read)."""
    view = await feed.feeds.admin.view(feed.name, must_exist=False)
    key, job_key = watch.key, feed.keys.job(job_id)
    at = last or "0-0"
    missing_since: float | None = None
    checked = time.monotonic()
    try:
        while True:
            watch.woken.clear()
            chunks = await _read_after(view.ctx, key, at)
            for chunk in chunks:
                at = chunk.id
                yield chunk
            if chunks:
                continue
            feed.seen(watch, at)
            wait = BLOCK_MS / 1000 if watch.armed else _ARMING_POLL_S
            try:
                await asyncio.wait_for(watch.woken.wait(), wait)
                continue
            except TimeoutError:
                pass
            now = time.monotonic()
            if now - checked < BLOCK_MS / 1000:
                continue
            checked = now
            state = await view.ctx.command(lambda c: c.hget(job_key, "state"))
            if state is None:
                missing_since = missing_since or now
                if (now - missing_since) * 1000 < MISSING_GRACE_MS:
                    continue
            elif state not in _FINISHED:
                missing_since = None
                continue
            # finished (or gone): what was streamed before is all there is
            while True:
                chunks = await _read_after(view.ctx, key, at)
                if not chunks:
                    return
                for chunk in chunks:
                    at = chunk.id
                    yield chunk
    finally:
        feed.unwatch(watch)
