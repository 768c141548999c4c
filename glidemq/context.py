"""One queue on one connection: the typed calls into the server library.

Queue, Worker and Job all talk to the server through a QueueContext, so the argument
layout of each FCALL lives in exactly one place.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from glide import GlideError as _GlideError

from .connection import Client
from .errors import JobNotFoundError, JobStateError, ServerError, ValidationError
from .functions import ensure_library
from .keys import QueueKeys
from .retry import DEFAULT_RETRY, RETRY_SAFE_FUNCTIONS, RetryPolicy, retrying, to_glidemq_error

if TYPE_CHECKING:
    from .serializers import Serializer

__all__ = ["QueueContext", "now_ms"]


def now_ms() -> int:
    """Wall-clock time in ms: job timestamps are shared with other processes and languages."""
    return int(time.time() * 1000)


def _s(value: bytes | str | int | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


class QueueContext:
    """A queue's keys bound to a connected client.

    Calls are retried as `glidemq.retry` says. The owner may swap `client` at any time (a
    renewed connection); `on_transport_failure` / `on_success` tell it how calls fare, and
    `keep_trying` (when set) returning False ends retries early (the owner is closing).
    """

    __slots__ = (
        "client",
        "compress",
        "keep_trying",
        "keys",
        "name",
        "on_success",
        "on_transport_failure",
        "retry",
        "serializer",
    )

    def __init__(
        self,
        client: Client,
        keys: QueueKeys,
        *,
        compress: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        serializer: Serializer | None = None,
    ) -> None:
        self.client = client
        self.serializer = serializer  # of job data written through this context; None: JSON
        self.keys = keys
        self.name = keys.name
        self.compress = compress
        self.retry = retry
        self.on_transport_failure: Callable[[], Awaitable[None]] | None = None
        self.on_success: Callable[[], None] | None = None
        self.keep_trying: Callable[[], bool] | None = None

    def _client(self) -> Client:
        return self.client

    async def fcall(
        self,
        function: str,
        keys: Sequence[str],
        args: Sequence[str | bytes],
        *,
        safe: bool | None = None,
    ) -> Any:
        """Call a library function on this queue's slot. `safe` (default: from
        `RETRY_SAFE_FUNCTIONS`) allows a retry after a failure that may have run it."""
        key_list, arg_list = list(keys), list(args)

        async def send(client: Client) -> Any:
            return await client.fcall(function, keys=key_list, arguments=arg_list)

        return await retrying(
            send,
            self._client,
            what=function,
            safe=function in RETRY_SAFE_FUNCTIONS if safe is None else safe,
            policy=self.retry,
            reload_library=ensure_library,
            on_transport_failure=self.on_transport_failure,
            on_success=self.on_success,
            keep_trying=self.keep_trying,
        )

    async def command(
        self, call: Callable[[Client], Awaitable[Any]] | Awaitable[Any], *, safe: bool = True
    ) -> Any:
        """Run a plain client command, errors mapped into the glidemq tree.

        Given `lambda client: client.hget(...)` it is retried (after an ambiguous failure only
        when `safe`, the default: plain commands are mostly reads); given an awaitable it is
        tried once.
        """
        if callable(call):
            return await retrying(
                call,
                self._client,
                what="command",
                safe=safe,
                policy=self.retry,
                on_transport_failure=self.on_transport_failure,
                on_success=self.on_success,
                keep_trying=self.keep_trying,
            )
        try:
            return await call
        except _GlideError as exc:
            raise to_glidemq_error(exc, "command") from exc

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

    # -- single-job operations -----------------------------------------------------------

    async def job_operation(self, function: str, job_id: str, *args: str, op: str) -> str:
        """Run a single-job function and turn its error replies into typed errors."""
        reply = _s(await self.fcall(function, self.job_op_keys, [job_id, *args]))
        if reply == "0":
            raise JobNotFoundError(self.name, job_id)
        if reply == "ERR:ACTIVE":
            raise JobStateError(job_id, op, "it is running; revoke it or wait for it to finish")
        if reply == "ERR:STATE":
            raise JobStateError(job_id, op, "not possible in its current state")
        if reply == "ERR:FINISHED":
            raise JobStateError(job_id, op, "it already finished")
        if reply == "ERR:BAD_OPTION":  # "change priority" -> field "priority"
            raise ValidationError(op.rsplit(" ", 1)[-1], "rejected by the server")
        if reply.startswith("ERR:"):
            raise ServerError(f"{function}: {reply}")
        return reply

    async def update_job(self, job_id: str, fields: Sequence[tuple[str, str | bytes]]) -> None:
        """Set fields of an existing job; a `progress` field also emits a progress event."""
        args: list[str | bytes] = [job_id, "1"]
        for name, value in fields:
            args += [name, value]
        reply = await self.fcall("glidemq_updateJob", [self.keys.events], args)
        if reply == 0:
            raise JobNotFoundError(self.name, job_id)

    async def get_fields(self, job_id: str) -> dict[bytes, bytes] | None:
        """The job's hash, or None when it does not exist."""
        key = self.keys.job(job_id)
        h = await self.command(lambda c: c.hgetall(key))
        return h or None

    async def get_state(self, job_id: str) -> str | None:
        key = self.keys.job(job_id)
        state = await self.command(lambda c: c.hget(key, "state"))
        return None if state is None else _s(state)

    async def retry_jobs(self, source: str, count: int, ids: Sequence[str] = ()) -> int:
        reply = await self.fcall(
            "glidemq_retryJobs", self.job_op_keys, [str(now_ms()), source, str(count), *ids]
        )
        return int(reply)

    async def move_active_to_delayed(
        self, job_id: str, entry_id: str, run_at: int, step: str = ""
    ) -> str:
        return _s(
            await self.fcall(
                "glidemq_moveActiveToDelayed",
                self.job_op_keys,
                [str(now_ms()), job_id, entry_id, str(run_at), "1", step],
            )
        )
