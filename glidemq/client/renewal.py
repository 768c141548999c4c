"""Noticing that a client's connection went silent, and replacing the client.

valkey-glide reconnects by itself when a connection breaks (a reset, a server restart, a
failover), but not when it goes silent: a connection whose packets vanish (a black-holed
route, a dropped NAT entry) only times out, call after call, forever. `Renewal` replaces a
Queue's client once its calls have been timing out for longer than one request time-out and
a fresh connection to the server answers (`probe`); glidemq.worker.watchdog does the same for a
Worker. Creating a valkey-glide client blocks the event loop until the connection is made,
so a new client is only made after `probe` saw the server answer on a connection of its own.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from glide import GlideError as _GlideError

from ..errors import ConnectionError
from ..timing.clock import monotonic
from .connection import Client, ConnectionOptions, close_client, create_client

if TYPE_CHECKING:
    from .context import QueueContext

__all__ = ["Renewal", "close_later", "probe", "queue_renewal"]

log = logging.getLogger("glidemq.worker.watchdog")

_PROBE_TIMEOUT = 1.0
SLACK = 1.0
"""Seconds on top of the longest a healthy call may take."""


async def probe(opts: ConnectionOptions, timeout: float = _PROBE_TIMEOUT) -> bool:
    """Whether a new connection to any of the server addresses answers a PING (any reply,
    even an authentication error, proves the server is there)."""

    async def one(host: str, port: int) -> bool:
        tls = None
        if opts.tls:
            tls = ssl.create_default_context()
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE  # liveness only: no data is exchanged
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port, ssl=tls)
            writer.write(b"*1\r\n$4\r\nPING\r\n")
            await writer.drain()
            return bool(await reader.readline())
        except (OSError, ssl.SSLError, EOFError):
            return False
        finally:
            if writer is not None:
                writer.close()

    async def any_answers() -> bool:
        backend = opts.backend
        if backend is not None:  # a server in this process: ask it over a client of its own
            client = await backend.connect("glidemq-probe")
            try:
                await client.ping()
                return True
            except _GlideError:
                return False
            finally:
                await client.close()
        for host, port in opts.addresses:
            if await one(host, port):
                return True
        return False

    try:
        return await asyncio.wait_for(any_answers(), timeout)
    except TimeoutError:
        return False


async def close_later(clients: list[Client | None], tasks: set[asyncio.Task[None]]) -> None:
    """Close replaced clients without making the caller wait for them."""

    async def close_all() -> None:
        for client in clients:
            await close_client(client)

    task = asyncio.get_running_loop().create_task(close_all())
    tasks.add(task)
    task.add_done_callback(tasks.discard)


class Renewal:
    """Tracks how a client's calls fare and calls `replace()` once they have been timing out
    for `stale_after` seconds and `probe` says the server answers (without `replace`, it only
    tracks: the Watchdog acts on `stale()`). Attach it to a QueueContext with `attach`."""

    def __init__(
        self,
        opts: ConnectionOptions,
        replace: Callable[[], Awaitable[None]] | None,
        stale_after: float | None = None,
    ) -> None:
        self.opts = opts
        self.replace = replace
        self.stale_after = (
            opts.request_timeout_ms / 1000 + SLACK if stale_after is None else stale_after
        )
        self.failing_since: float | None = None
        self.last_try = float("-inf")
        self.renewals = 0

    def attach(self, ctx: QueueContext) -> None:
        ctx.on_success = self.ok
        ctx.on_transport_failure = self.failed

    def ok(self) -> None:
        self.failing_since = None

    def stale(self) -> bool:
        """Calls have been failing for longer than `stale_after`."""
        since = self.failing_since
        return since is not None and monotonic() - since >= self.stale_after

    async def failed(self, error: BaseException | None = None) -> None:
        """A call timed out or lost its connection (`error`, what valkey-glide raised)."""
        now = monotonic()
        if self.failing_since is None:
            self.failing_since = now
            return
        if not self.stale() or now - self.last_try < self.stale_after:
            return
        self.last_try = now
        if self.replace is not None and await probe(self.opts):
            await self.replace()
            self.renewals += 1
            self.failing_since = monotonic()  # the new client gets a full period


def queue_renewal(ctx: QueueContext, opts: ConnectionOptions, name: str) -> Renewal:
    """A Renewal that swaps a new client into `ctx` (a Queue's context)."""
    closing: set[asyncio.Task[None]] = set()

    async def replace() -> None:
        try:
            client = await create_client(opts, name=name)
        except ConnectionError:
            return
        old, ctx.client = ctx.client, client
        log.warning("glidemq: %s: calls kept timing out; connected a new client", name)
        await close_later([old], closing)

    renewal = Renewal(opts, replace)
    renewal.attach(ctx)
    return renewal
