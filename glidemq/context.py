"""One queue on one connection: the typed calls into the server library.

Queue, Worker and Job all talk to the server through a QueueContext, so the argument
layout of each FCALL lives in exactly one place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from glide import ClosingError as _GlideClosing
from glide import ConnectionError as _GlideConnectionError
from glide import GlideError as _GlideError
from glide import TimeoutError as _GlideTimeout

from .connection import Client
from .errors import ConnectionError, JobNotFoundError, JobStateError, ServerError
from .functions import call
from .keys import QueueKeys

__all__ = ["QueueContext", "now_ms"]


def now_ms() -> int:
    """Wall-clock time in ms: job timestamps are shared with other processes and languages."""
    return int(time.time() * 1000)


def _s(value: bytes | str | int | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


class QueueContext:
    """A queue's keys bound to a connected client."""

    __slots__ = ("client", "compress", "keys", "name")

    def __init__(self, client: Client, keys: QueueKeys, *, compress: bool = False) -> None:
        self.client = client
        self.keys = keys
        self.name = keys.name
        self.compress = compress

    async def fcall(self, function: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        """Call a library function on this queue's slot."""
        return await call(self.client, function, keys, args)

    async def command(self, coro: Any) -> Any:
        """Await a plain client command, mapping client errors into the glidemq tree."""
        try:
            return await coro
        except _GlideError as exc:
            # A time-out is a transport failure, as in functions.call: the server is gone or stuck.
            transport = isinstance(exc, _GlideConnectionError | _GlideClosing | _GlideTimeout)
            if transport or "connection" in str(exc).lower():
                raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
            raise ServerError(str(exc)) from exc

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
        h = await self.command(self.client.hgetall(self.keys.job(job_id)))
        return h or None

    async def get_state(self, job_id: str) -> str | None:
        state = await self.command(self.client.hget(self.keys.job(job_id), "state"))
        return None if state is None else _s(state)

    async def retry_jobs(self, source: str, count: int, ids: Sequence[str] = ()) -> int:
        reply = await self.fcall(
            "glidemq_retryJobs", self.job_op_keys, [str(now_ms()), source, str(count), *ids]
        )
        return int(reply)

    async def move_active_to_delayed(self, job_id: str, entry_id: str, run_at: int) -> str:
        return _s(
            await self.fcall(
                "glidemq_moveActiveToDelayed",
                self.job_op_keys,
                [str(now_ms()), job_id, entry_id, str(run_at), "1"],
            )
        )
