"""One queue on one connection: how calls reach the server.

Queue, Worker and Job all talk to the server through a QueueContext: library calls (built
by glidemq.wire), pipelines of them, and plain commands, all retried as glidemq.client.retry says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from glide import (
    Batch,
    BatchOptions,
    ClusterBatch,
    ClusterBatchOptions,
    GlideClusterClient,
    SlotKeyRoute,
    SlotType,
)
from glide import GlideError as _GlideError

from ..errors import DurabilityError, DurabilityTimeoutError
from ..keys import QueueKeys
from ..options.durability import Durability
from ..timing.clock import WALL_CLOCK, Clock, now_ms
from .connection import Client
from .functions import ensure_library, needs_no_wait
from .retry import (
    DEFAULT_RETRY,
    Failure,
    RetryPolicy,
    classify,
    retry_batch,
    retrying,
    to_glidemq_error,
)

if TYPE_CHECKING:
    from ..encoding.serializers import Serializer

__all__ = ["ClientSender", "QueueContext", "now_ms"]

T = TypeVar("T")


def _s(value: bytes | str | int | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


class QueueContext:
    """A queue's keys bound to a connected client.

    Calls are retried as `glidemq.client.retry` says. The owner may swap `client` at any time (a
    renewed connection); `on_transport_failure` / `on_success` tell it how calls fare, and
    `keep_trying` (when set) returning False ends retries early (the owner is closing).

    With `durability` (ConnectionOptions.confirmation), every library call that writes goes
    out with the waiting command (WAIT or WAITAOF) behind it in one pipeline, on the node of
    the queue's slot, and raises DurabilityTimeoutError when the confirmation falls short;
    a pipeline of calls waits once, after its last call.
    """

    __slots__ = (
        "__weakref__",  # per-context state of the layers above (the step calls' batches)
        "_wait_timeout_ms",
        "client",
        "clock",
        "compress",
        "durability",
        "keep_trying",
        "keys",
        "name",
        "on_success",
        "on_transport_failure",
        "retry",
        "serializer",
        "where",
    )

    def __init__(
        self,
        client: Client,
        keys: QueueKeys,
        *,
        compress: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        serializer: Serializer | None = None,
        clock: Clock = WALL_CLOCK,
        durability: Durability | None = None,
        request_timeout_ms: int = 10_000,
        where: str | None = None,
    ) -> None:
        self.client = client
        self.durability = durability
        self.where = where  # the server's address, for the outage record (client.outage)
        # a batch that waits may take the wait's timeout on top of the usual one
        self._wait_timeout_ms = request_timeout_ms + (durability.timeout_ms if durability else 0)
        self.clock = clock  # the server's: what job times are read from
        self.serializer = serializer  # of job data written through this context; None: JSON
        self.keys = keys
        self.name = keys.name
        self.compress = compress
        self.retry = retry
        self.on_transport_failure: Callable[[BaseException], Awaitable[None]] | None = None
        self.on_success: Callable[[], None] | None = None
        self.keep_trying: Callable[[], bool] | None = None

    def now_ms(self) -> int:
        """The time in ms on this queue's clock (the wall clock, or an in-process server's)."""
        return self.clock.now_ms()

    def _client(self) -> Client:
        return self.client

    async def fcall(
        self,
        function: str,
        keys: Sequence[str],
        args: Sequence[str | bytes],
        *,
        safe: bool = False,
        on_ambiguous: Callable[[], None] | None = None,
    ) -> Any:
        """Call a library function on this queue's slot. `safe` allows a retry after a
        failure that may have run it (the wire layouts say which functions are);
        `on_ambiguous` runs after each such failure, before any retry."""
        key_list, arg_list = list(keys), list(args)
        if self.durability is not None and function not in needs_no_wait():
            return await self._fcall_confirmed(function, key_list, arg_list, safe, on_ambiguous)

        async def send(client: Client) -> Any:
            return await client.fcall(function, keys=key_list, arguments=arg_list)

        return await self._retrying(send, function, safe, on_ambiguous=on_ambiguous)

    async def _retrying(
        self,
        send: Callable[[Client], Awaitable[T]],
        what: str,
        safe: bool,
        library: bool = True,
        on_ambiguous: Callable[[], None] | None = None,
    ) -> T:
        """`send` on this context's client under its retry policy, outage hooks and budget
        (`library`: a node that lost the function library gets it again; `on_ambiguous` as
        for `fcall`)."""
        return await retrying(
            send,
            self._client,
            what=what,
            safe=safe,
            policy=self.retry,
            reload_library=ensure_library if library else None,
            on_transport_failure=self._hook(on_ambiguous),
            on_success=self.on_success,
            keep_trying=self.keep_trying,
            where=self.where,
        )

    def _hook(
        self, on_ambiguous: Callable[[], None] | None
    ) -> Callable[[BaseException], Awaitable[None]] | None:
        """The transport-failure hook of one call: the context's, after `on_ambiguous`."""
        if on_ambiguous is None:
            return self.on_transport_failure
        then = self.on_transport_failure

        async def hook(exc: BaseException) -> None:
            on_ambiguous()
            if then is not None:
                await then(exc)

        return hook

    def _batch(
        self, cluster: bool
    ) -> tuple[Batch | ClusterBatch, BatchOptions | ClusterBatchOptions]:
        """An empty pipeline and the options it goes with: with durability, sent whole to
        the primary of the queue's slot (where the wait must run) and given the wait's time."""
        if not cluster:
            return Batch(False), BatchOptions(timeout=self._wait_timeout_ms)
        route = SlotKeyRoute(SlotType.PRIMARY, self.keys.meta)
        return ClusterBatch(False), ClusterBatchOptions(route=route, timeout=self._wait_timeout_ms)

    async def _fcall_confirmed(
        self,
        function: str,
        keys: list[str],
        args: list[str | bytes],
        safe: bool,
        on_ambiguous: Callable[[], None] | None,
    ) -> Any:
        """FCALL then the durability wait, in one pipeline on the slot's primary."""
        durability = self.durability
        assert durability is not None
        wait = durability.command()

        async def send(client: Client) -> tuple[Any, Any]:
            batch, options = self._batch(isinstance(client, GlideClusterClient))
            batch.fcall(function, keys, args)
            batch.custom_command(wait)
            replies = await _exec_with(batch, options, client)
            reply, confirmation = replies
            if isinstance(reply, _GlideError):
                raise reply  # as a lone FCALL would have: retried, reloaded or raised
            return reply, confirmation

        reply, confirmation = await self._retrying(send, function, safe, on_ambiguous=on_ambiguous)
        check_confirmation(durability, function, confirmation, reply)
        return reply

    async def command(
        self, call: Callable[[Client], Awaitable[Any]] | Awaitable[Any], *, safe: bool = True
    ) -> Any:
        """Run a plain client command, errors mapped into the glidemq tree.

        Given `lambda client: client.hget(...)` it is retried (after an ambiguous failure only
        when `safe`, the default: plain commands are mostly reads); given an awaitable it is
        tried once.
        """
        if callable(call):
            return await self._retrying(call, "command", safe, library=False)
        try:
            return await call
        except _GlideError as exc:
            raise to_glidemq_error(exc, "command") from exc

    async def confirm_writes(self, what: str) -> None:
        """With durability, wait for the plain commands this context just wrote (queue
        settings): WAIT on the connection to the slot's primary, the one that carried them.
        Not resent: on another connection a wait would confirm nothing."""
        durability = self.durability
        if durability is None:
            return
        wait = durability.command()

        async def send(client: Client) -> Any:
            if isinstance(client, GlideClusterClient):
                route = SlotKeyRoute(SlotType.PRIMARY, self.keys.meta)
                return await client.custom_command(wait, route)
            return await client.custom_command(wait)

        try:
            confirmation = await retrying(
                send, self._client, what=what, safe=False, policy=self.retry
            )
        except Exception as exc:  # the wait itself failed: the writes are not confirmed
            raise DurabilityError(what, f"{wait[0]} failed: {exc}") from exc
        check_confirmation(durability, what, confirmation, None)

    # -- keys of the common call shapes -------------------------------------------------

    @property
    def fetch_keys(self) -> list[str]:
        k = self.keys
        return [k.stream, k.completed, k.events, k.scheduled, k.meta]

    @property
    def fail_keys(self) -> list[str]:
        k = self.keys
        return [k.stream, k.failed, k.events, k.scheduled, k.meta]

    @property
    def job_op_keys(self) -> list[str]:
        k = self.keys
        return [k.stream, k.scheduled, k.events]

    # -- pipelines -----------------------------------------------------------------------

    async def pipeline(
        self,
        calls: Sequence[tuple[str, list[str], list[str | bytes], bool]],
        *,
        safe: bool,
        resend: bool = True,
    ) -> list[Any]:
        """Send library calls (glidemq.wire `Call`s) as one non-atomic pipeline; one reply
        per call, an exception object where that call failed. `safe`: the whole pipeline
        may run twice. `resend`: calls answered "did not run" (a slot that moved) go again,
        alone and with backoff; without it the pipeline is sent once."""
        client = self.client
        cluster = isinstance(client, GlideClusterClient)
        durability = self.durability
        confirmations: list[Any] = []  # one per pipeline that ran a write

        async def run(indices: Sequence[int]) -> Any:
            if durability is not None:
                return await confirmed(indices)
            batch: Batch | ClusterBatch = ClusterBatch(False) if cluster else Batch(False)
            for i in indices:
                function, keys, args, _ = calls[i]
                batch.fcall(function, keys, args)
            return await self.command(partial(_exec, batch), safe=safe)

        async def confirmed(indices: Sequence[int]) -> list[Any]:
            # one wait behind the whole pipeline: it covers every write before it
            assert durability is not None
            batch, options = self._batch(cluster)
            for i in indices:
                function, keys, args, _ = calls[i]
                batch.fcall(function, keys, args)
            batch.custom_command(durability.command())
            replies = list(await self.command(partial(_exec_with, batch, options), safe=safe) or [])
            confirmation = replies.pop()
            if any(not _did_not_run(r) for r in replies):
                confirmations.append(confirmation)
            return replies

        async def send(indices: Sequence[int]) -> list[Any]:
            if resend:
                return await retry_batch(
                    lambda sub: run([indices[j] for j in sub]), len(indices), policy=self.retry
                )
            return list(await run(indices) or [])

        replies = await send(range(len(calls)))
        lost = [i for i, r in enumerate(replies) if _library_missing(r)]
        if lost:
            # those calls did not run: load the library where it was lost and send them again
            await ensure_library(client)
            for i, reply in zip(lost, await send(lost), strict=True):
                replies[i] = reply
        if durability is not None:
            what = calls[0][0] if calls else "pipeline"
            for confirmation in confirmations:
                check_confirmation(durability, what, confirmation, replies)
        return replies

    # -- plain reads ---------------------------------------------------------------------

    async def get_fields(self, job_id: str) -> dict[bytes, bytes] | None:
        """The job's hash, or None when it does not exist."""
        key = self.keys.job(job_id)
        h = await self.command(lambda c: c.hgetall(key))
        return h or None

    async def get_state(self, job_id: str) -> str | None:
        """The job's state, `dead_letter` for a failed job parked in the dead-letter set;
        None when the job does not exist."""
        key = self.keys.job(job_id)
        state = await self.command(lambda c: c.hget(key, "state"))
        if state is None:
            return None
        text = _s(state)
        if text == "failed":
            dlq = self.keys.dlq
            if await self.command(lambda c: c.zscore(dlq, job_id)) is not None:
                return "dead_letter"
        return text


def _library_missing(reply: Any) -> bool:
    return isinstance(reply, _GlideError) and classify(reply) is Failure.MISSING_LIBRARY


def _did_not_run(reply: Any) -> bool:
    return isinstance(reply, _GlideError) and classify(reply) in (
        Failure.NOT_RUN,
        Failure.MISSING_LIBRARY,
    )


def check_confirmation(durability: Durability, what: str, confirmation: Any, reply: Any) -> None:
    """Raise DurabilityTimeoutError when the wait's reply falls short of `durability`,
    DurabilityError when the wait itself failed (WAITAOF without an AOF, WAIT on a node
    that is no longer a primary). `reply` is what the write(s) answered."""
    if isinstance(confirmation, _GlideError):
        raise DurabilityError(
            what, f"{durability.command()[0]} failed: {confirmation}", reply=reply
        )
    ok, seen = durability.confirmed(confirmation)
    if not ok:
        raise DurabilityTimeoutError(what, seen, durability.timeout_ms, reply=reply)


async def _exec(batch: Batch | ClusterBatch, client: Client) -> Any:
    return await client.exec(batch, False)  # type: ignore[arg-type,unused-ignore]


async def _exec_with(
    batch: Batch | ClusterBatch, options: BatchOptions | ClusterBatchOptions, client: Client
) -> Any:
    return await client.exec(batch, False, options)  # type: ignore[arg-type,unused-ignore]


class ClientSender:
    """Library calls on a bare client (no queue context): retried as glidemq.client.retry says,
    the library loaded again where a node lost it."""

    __slots__ = ("client", "retry")

    def __init__(self, client: Client, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.client = client
        self.retry = retry

    async def fcall(
        self,
        function: str,
        keys: Sequence[str],
        args: Sequence[str | bytes],
        *,
        safe: bool = False,
    ) -> Any:
        """FCALL `function`; `safe` as in `QueueContext.fcall`."""
        key_list, arg_list = list(keys), list(args)

        async def send(c: Client) -> Any:
            return await c.fcall(function, keys=key_list, arguments=arg_list)

        return await retrying(
            send,
            lambda: self.client,
            what=function,
            safe=safe,
            policy=self.retry,
            reload_library=ensure_library,
        )
