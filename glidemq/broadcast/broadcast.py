"""Broadcast: every subscription receives every message, each with its own retries.

A broadcast is one stream (`<prefix>:broadcast:{name}`); each subscription is a consumer
group on it. A `BroadcastWorker` forwards what its group reads into the subscription's own
queue (`"<name>@<subscription>"`, the job id being the message id, so forwarding twice adds
one job) and runs a regular `Worker` on that queue: retries, backoff, stall recovery, dead
letters and retention work per subscription exactly as for any queue.

Entries every subscription is done with are trimmed by the workers; `max_len` caps the
stream for subscriptions that stop reading.

Subjects (glidemq.broadcast.subjects): a message may carry a subject (`orders.eu.created`) and a
subscription a filter of patterns (`orders.*.created`, `orders.>`), stored in the hash
`<prefix>:broadcast:{name}:subjects`. The forwarding workers apply the filter: a message
that does not match is acknowledged for that subscription and never becomes a job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from uuid import uuid4

from glide import ClosingError as _GlideClosing
from glide import ConnectionError as _GlideConnectionError
from glide import GlideError as _GlideError
from glide import (
    StreamAddOptions,
    StreamGroupOptions,
    StreamReadGroupOptions,
    TrimByMaxLen,
)
from glide import TimeoutError as _GlideTimeout

from ..client.connection import Client, ConnectionLike, close_client, resolve_connection
from ..client.context import ClientSender, QueueContext
from ..client.functions import connect_with_library
from ..client.lazy import LazyClient
from ..client.retry import error_code
from ..encoding.serialize import encode_data
from ..errors import ConnectionError, GlideMQError, ServerError, ValidationError
from ..keys import DEFAULT_PREFIX, QueueKeys, validate_prefix, validate_queue_name
from ..queue.limits import is_full
from ..types import JobOptions, wire_opts
from ..wire import Call, adds, codes, ops
from ..worker.worker import Processor, Worker
from .subjects import SubjectFilter, check_subject

__all__ = ["Broadcast", "BroadcastWorker", "broadcast_key", "subjects_key", "subscription_queue"]

D = TypeVar("D")
R = TypeVar("R")

_READ_COUNT = 500
_BLOCK_MS = 1000
_MAINTENANCE_S = 5.0  # how often a worker recovers stuck entries and trims the stream
_FULL_PAUSE_S = 0.5  # wait after the subscription queue refused jobs (max_waiting)


def broadcast_key(name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The stream key of broadcast `name`."""
    return f"{validate_prefix(prefix)}:broadcast:{{{validate_queue_name(name)}}}"


def subjects_key(name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The hash of broadcast `name` holding each subscription's subject patterns."""
    return broadcast_key(name, prefix) + ":subjects"


def _patterns(subjects: str | Iterable[str] | None) -> SubjectFilter | None:
    return None if subjects is None else SubjectFilter.of(subjects)


async def _read_filter(client: Client, key: str, subscription: str) -> SubjectFilter | None:
    raw = await _command("read subjects", client.hget(key, subscription))
    if not raw:
        return None
    return SubjectFilter(tuple(_s(raw).split("\n")))


def subscription_queue(name: str, subscription: str) -> str:
    """Name of the queue that holds a subscription's jobs: `"<name>@<subscription>"`."""
    validate_queue_name(subscription)
    return validate_queue_name(f"{name}@{subscription}")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _command(what: str, coro: Any) -> Any:
    try:
        return await coro
    except (_GlideConnectionError, _GlideClosing, _GlideTimeout) as exc:
        raise ConnectionError(f"{what}: {exc}") from exc
    except _GlideError as exc:
        raise ServerError(f"{what}: {exc}", error_code(exc).code) from exc


async def _create_group(client: Client, stream: str, group: str, from_start: bool) -> bool:
    try:
        await _command(
            "create subscription",
            client.xgroup_create(
                stream, group, "0" if from_start else "$", StreamGroupOptions(make_stream=True)
            ),
        )
    except ServerError as exc:
        if exc.code == "BUSYGROUP":
            return False
        raise
    return True


class Broadcast:
    """Publish messages that every subscription of broadcast `name` receives.

    A subscription receives the messages published after it was created (by `subscribe()`
    or by its first `BroadcastWorker`). `max_len` caps the stream (approximately); a
    subscription that falls further behind loses the oldest messages. None: no cap.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        compression: bool = False,
        max_len: int | None = 100_000,
    ) -> None:
        self.name = name
        self.key = broadcast_key(name, prefix)
        self.subjects_key = subjects_key(name, prefix)
        self.connection = resolve_connection(connection)
        self.compression = compression
        if max_len is not None and (
            isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1
        ):
            raise ValidationError("max_len", f"must be an integer >= 1 or None, got {max_len!r}")
        self.max_len = max_len
        self._conn = LazyClient(self.connection, f"glidemq-bc-{name}", f"broadcast {name!r}")

    async def __aenter__(self) -> Self:
        await self._connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _connect(self) -> Client:
        return await self._conn.get()

    async def publish(self, name: str, data: Any = None, *, subject: str | None = None) -> str:
        """Publish one message; returns its id (also the job id in every subscription).

        `subject` (`orders.eu.created`, no wildcards) is what subscriptions with a subject
        filter match; a message without one reaches only subscriptions without a filter.
        """
        if not isinstance(name, str):
            raise ValidationError("name", "must be a string")
        if subject is not None:
            check_subject(subject)
        payload = encode_data(data, compress=self.compression)
        client = await self._connect()
        trim = TrimByMaxLen(exact=False, threshold=self.max_len) if self.max_len else None
        fields: list[tuple[str, str | bytes]] = [
            ("name", name),
            ("data", payload),
            ("ts", str(self.connection.clock.now_ms())),
        ]
        if subject is not None:
            fields.append(("subject", subject))
        entry = await _command(
            "publish", client.xadd(self.key, fields, StreamAddOptions(trim=trim))
        )
        return _s(entry)

    async def subscribe(
        self,
        subscription: str,
        *,
        from_start: bool = False,
        subjects: str | Iterable[str] | None = None,
    ) -> bool:
        """Create a subscription now, so it receives what is published from now on (with
        `from_start`: every message still in the stream). False if it existed already.

        `subjects`: one pattern or several (`orders.*.created`, `orders.>`); the
        subscription then receives only messages whose subject matches one of them (see
        `set_subjects`). None leaves the subscription's filter as it is.
        """
        subscription_queue(self.name, subscription)
        wanted = _patterns(subjects)
        client = await self._connect()
        created = await _create_group(client, self.key, subscription, from_start)
        if wanted is not None:
            await self._store_filter(client, subscription, wanted)
        return created

    async def _store_filter(
        self, client: Client, subscription: str, wanted: SubjectFilter | None
    ) -> None:
        if wanted is None:
            await _command("set subjects", client.hdel(self.subjects_key, [subscription]))
        else:
            value = "\n".join(wanted.patterns)
            await _command("set subjects", client.hset(self.subjects_key, {subscription: value}))

    async def set_subjects(self, subscription: str, subjects: str | Iterable[str] | None) -> None:
        """Set the subject filter of a subscription: it receives only messages whose subject
        matches one of the patterns (None: every message). Its workers apply a change
        within a few seconds (they re-read it with their maintenance pass)."""
        subscription_queue(self.name, subscription)
        wanted = _patterns(subjects)
        await self._store_filter(await self._connect(), subscription, wanted)

    async def get_subjects(self, subscription: str) -> tuple[str, ...] | None:
        """The subject patterns of a subscription, or None when it has no filter."""
        found = await _read_filter(await self._connect(), self.subjects_key, subscription)
        return None if found is None else found.patterns

    async def unsubscribe(self, subscription: str) -> bool:
        """Delete a subscription: it receives nothing more. Its queue and jobs stay (see
        `subscription_queue`). False if it did not exist."""
        client = await self._connect()
        await _command("unsubscribe", client.hdel(self.subjects_key, [subscription]))
        # without the stream, XGROUP DESTROY answers a plain ERR: ask first, not its words
        if not await _command("unsubscribe", client.exists([self.key])):
            return False
        return bool(await _command("unsubscribe", client.xgroup_destroy(self.key, subscription)))

    async def subscriptions(self) -> list[str]:
        """Names of the subscriptions."""
        client = await self._connect()
        if not await _command("subscriptions", client.exists([self.key])):
            return []  # XINFO GROUPS would answer a plain ERR
        groups = await _command("subscriptions", client.xinfo_groups(self.key))
        return sorted(_s(g[b"name"]) for g in groups)

    async def trim(self) -> int:
        """Delete the messages every subscription is done with; returns how many. Workers do
        this on their own every few seconds."""
        client = await self._connect()
        return await ops.bc_trim(ClientSender(client), self.key)

    async def length(self) -> int:
        """Messages in the stream (published and not trimmed yet)."""
        client = await self._connect()
        return int(await _command("length", client.xlen(self.key)))

    async def delete(self) -> None:
        """Delete the broadcast: its messages, subscriptions and their subject filters (their
        queues stay)."""
        client = await self._connect()
        await _command("delete", client.delete([self.key, self.subjects_key]))

    async def close(self) -> None:
        """Close the connection. Idempotent."""
        await self._conn.close()


class BroadcastWorker(Generic[D, R]):
    """Runs `processor(job)` for every message of broadcast `name`, as subscription
    `subscription`.

    `job_options` (attempts, backoff, timeout, retention, ...) apply to this subscription's
    jobs; the other keywords are `WorkerOptions` for its Worker. Several BroadcastWorkers of
    one subscription share its messages, like Workers of one queue. A message read by a
    worker that died before forwarding it is taken over after `reclaim_idle_ms`.
    `subjects` (patterns, as in `Broadcast.set_subjects`) sets the subscription's subject
    filter when the worker starts; without it the worker uses the filter stored for the
    subscription. Messages that do not match are acknowledged and counted in `skipped`;
    the processor never sees them.
    """

    def __init__(
        self,
        name: str,
        subscription: str,
        processor: Processor[D, R] | Callable[[Any], Any] | str,
        *,
        connection: ConnectionLike = None,
        prefix: str = DEFAULT_PREFIX,
        job_options: JobOptions | Mapping[str, Any] | None = None,
        from_start: bool = False,
        reclaim_idle_ms: int = 5000,
        subjects: str | Iterable[str] | None = None,
        **worker_settings: Any,
    ) -> None:
        self.name = name
        self._wanted = _patterns(subjects)
        self.subscription = subscription
        self.queue_name = subscription_queue(name, subscription)
        self.stream = broadcast_key(name, prefix)
        self._subjects_key = subjects_key(name, prefix)
        self._filter: SubjectFilter | None = None
        opts = JobOptions.coerce(job_options)
        if opts.job_id is not None or opts.deduplication is not None:
            raise ValidationError(
                "job_options", "job_id and deduplication are set per message, not per worker"
            )
        if isinstance(reclaim_idle_ms, bool) or not isinstance(reclaim_idle_ms, int):
            raise ValidationError("reclaim_idle_ms", "must be an integer")
        if reclaim_idle_ms < 100:
            raise ValidationError("reclaim_idle_ms", "must be >= 100")
        self.job_options = opts
        self.from_start = from_start
        self.reclaim_idle_ms = reclaim_idle_ms
        self.worker: Worker[D, R] = Worker(
            self.queue_name, processor, connection=connection, prefix=prefix, **worker_settings
        )
        self.events = self.worker.events
        self.connection = self.worker.connection
        self.forwarded = 0
        """Messages this worker forwarded into the subscription's queue."""
        self.skipped = 0
        """Messages this worker acknowledged without a job: their subject did not match."""
        self._keys = QueueKeys(self.queue_name, prefix)
        self._opts_json = wire_opts(opts)
        self._consumer = f"fwd-{uuid4().hex}"
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        """Listen to an event of the subscription's Worker (completed, failed, error, ...)."""
        return self.worker.on(event, handler)

    async def start(self) -> None:
        """Create the subscription if needed, start the Worker and the forwarding."""
        if self._started:
            return
        self._started = True
        try:
            self._client = await connect_with_library(
                self.connection, name=f"glidemq-bc-{self.queue_name}"
            )
            await _create_group(self._client, self.stream, self.subscription, self.from_start)
            if self._wanted is not None:
                value = "\n".join(self._wanted.patterns)
                await _command(
                    "set subjects",
                    self._client.hset(self._subjects_key, {self.subscription: value}),
                )
            await self._refresh_filter(self._client)
            await self.worker.start()
        except BaseException:
            await close_client(self._client)
            self._client = None
            self._started = False
            raise
        self._task = asyncio.get_running_loop().create_task(
            self._forward_loop(), name=f"glidemq-bc-{self.queue_name}"
        )

    async def run(self) -> None:
        """Start (if needed) and wait until closed."""
        await self.start()
        await self.worker.run()

    async def close(self, force: bool = False, timeout: float | None = None) -> None:
        """Stop forwarding, then close the Worker (see `Worker.close`). Idempotent."""
        task, self._task = self._task, None
        client, self._client = self._client, None
        await close_client(client)  # ends a blocking read in progress
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.worker.close(force=force, timeout=timeout)

    # -- forwarding ------------------------------------------------------------------------

    async def _forward_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_maintenance = 0.0
        backoff = 0.05
        read_opts = StreamReadGroupOptions(block_ms=_BLOCK_MS, count=_READ_COUNT)
        while self._client is not None:
            client = self._client
            try:
                if loop.time() >= next_maintenance:
                    next_maintenance = loop.time() + _MAINTENANCE_S
                    await self._refresh_filter(client)
                    await self._reclaim(client)
                    await ops.bc_trim(ClientSender(client), self.stream)
                reply = await _command(
                    "read broadcast",
                    client.xreadgroup(
                        {self.stream: ">"}, self.subscription, self._consumer, read_opts
                    ),
                )
                if reply:
                    for entries in reply.values():
                        if await self._forward(client, entries):
                            await asyncio.sleep(_FULL_PAUSE_S)
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._closing():
                    return
                self.events.emit("error", GlideMQError(f"broadcast {self.name!r}: {exc}"))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _closing(self) -> bool:
        return self._client is None

    async def _refresh_filter(self, client: Client) -> None:
        """Re-read the subscription's subject filter (another worker or `set_subjects` may
        have changed it)."""
        self._filter = await _read_filter(client, self._subjects_key, self.subscription)

    async def _reclaim(self, client: Client) -> None:
        """Take over entries read but never forwarded (a dead worker, a full queue)."""
        start: Any = "0-0"
        for _ in range(20):  # bounded work per pass
            r = await _command(
                "reclaim broadcast",
                client.xautoclaim(
                    self.stream,
                    self.subscription,
                    self._consumer,
                    self.reclaim_idle_ms,
                    start,
                    _READ_COUNT,
                ),
            )
            start, claimed = r[0], r[1]
            if claimed and await self._forward(client, claimed):
                return
            if _s(start) == "0-0":
                return

    async def _forward(self, client: Client, entries: Mapping[bytes, Any]) -> bool:
        """Add one job per entry to the subscription's queue and ack the entries that are
        there now. Returns True when the queue refused some (max_waiting)."""
        ids: list[bytes] = []
        gone: list[bytes] = []
        k, o = self._keys, self.job_options
        calls: list[Call] = []
        now = self.connection.clock.now_ms()
        for entry_id, pairs in entries.items():
            if pairs is None:  # trimmed while pending
                gone.append(entry_id)
                continue
            fields: dict[bytes, bytes] = {f: v for f, v in pairs}
            if self._filter is not None:
                subject = fields.get(b"subject")
                if not self._filter.matches(None if subject is None else _s(subject)):
                    self.skipped += 1  # acknowledged for this subscription, never a job
                    gone.append(entry_id)
                    continue
            # the message id is the custom job id; the job options' group, ordering and
            # LIFO settings apply
            name, data = fields.get(b"name", b""), fields.get(b"data", b"null")
            args = adds.job_args(name, data, self._opts_json, now, o, entry_id)
            calls.append(adds.add_job_call(k, args))
            ids.append(entry_id)
        full = False
        done = list(gone)
        if ids:
            ctx = QueueContext(
                client,
                k,
                clock=self.connection.clock,
                durability=self.connection.confirmation,
                request_timeout_ms=self.connection.request_timeout_ms,
            )
            replies = await ctx.pipeline(calls, safe=False, resend=False)
            for entry_id, reply in zip(ids, replies or [], strict=True):
                if isinstance(reply, Exception):
                    raise ServerError(f"forward broadcast: {reply}")
                if is_full(reply):
                    full = True  # stays pending: taken over again later
                    continue
                text = _s(reply)
                if codes.is_error(text):
                    self.events.emit(
                        "error",
                        ServerError(f"broadcast message {_s(entry_id)} not forwarded: {text}"),
                    )
                elif text != "duplicate":
                    self.forwarded += 1
                done.append(entry_id)
        if done:
            await _command("ack broadcast", client.xack(self.stream, self.subscription, done))
        return full
