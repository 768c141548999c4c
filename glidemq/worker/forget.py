"""Jobs a fetch took whose answer never reached the Worker: handed back, uncharged.

A fetch that times out or loses its connection may still have run on the server. The jobs
it took then sit in this worker's pending list, started as far as the server knows, and the
worker never saw them: left alone, stall recovery takes them back a lock duration later and
charges each a stall it never had (with `max_stalled_count` 0 it fails them). So every fetch
carries a token, kept in the jobs it activates (job field fetchTok). After such a failure,
and also when a later try of the same call was answered (the failed try may have taken jobs
too), the worker asks the server to hand back what that token took, except the entries the
answer delivered (glidemq_forgetFetch). The request goes on the client the failed call used:
the server runs a connection's calls in order, so the failed call ran first if it ever does.

Until the server answers, the request is retried; a Worker that closes hands back every
entry it holds anyway. A worker that dies before asking leaves the jobs to stall recovery,
as before.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..client.context import ClientSender
from ..errors import GlideMQError
from ..wire import fetch as wire_fetch

if TYPE_CHECKING:
    from ..client.connection import Client
    from .link import WorkerLink

__all__ = ["LostFetches"]

log = logging.getLogger("glidemq.worker")

_BACKOFF = (0.05, 2.0)  # first and longest pause between tries of a request, seconds


class LostFetches:
    """The fetch tokens of one Worker (`token`) and the requests to forget those whose
    answer was lost (`lost`), sent in the background by `spawn`."""

    __slots__ = ("_count", "_prefix", "_running", "link", "pending", "spawn")

    def __init__(self, link: WorkerLink, spawn: Callable[[Any], None]) -> None:
        self.link = link
        self.spawn = spawn
        # random: tokens of an earlier worker under the same consumer name never match
        self._prefix = f"{random.getrandbits(32):08x}."
        self._count = 0
        self.pending: list[tuple[str, list[str], Client | None]] = []
        """Token, entry ids to keep, the client the call used (None: the queue context)."""
        self._running = False

    def token(self) -> str:
        """The token of a fetch about to be sent."""
        self._count += 1
        return f"{self._prefix}{self._count}"

    def lost(self, token: str, delivered: Iterable[Any] = (), client: Client | None = None) -> None:
        """The call that fetched with `token` may have taken jobs this worker never saw:
        `delivered` is the flat reply of a try that was answered (entry, job, fields ...),
        `client` the bare client the call used (None: the queue context)."""
        keep = [_text(e) for e in list(delivered)[0::3]]
        self.pending.append((token, keep, client))
        if not self._running:
            self._running = True
            self.spawn(self._send())

    def watch(self) -> tuple[Callable[[], None], Callable[[], bool]]:
        """A hook for a call's ambiguous failures and a test of whether one happened."""
        seen = [False]

        def hook() -> None:
            seen[0] = True

        return hook, lambda: seen[0]

    async def _send(self) -> None:
        link = self.link
        pause = _BACKOFF[0]
        try:
            while self.pending and not link.closing:
                token, keep, client = self.pending[0]
                ctx = link.ctx
                if ctx is None:
                    return
                if client is not None and client is not link.blocking:
                    client = None  # replaced since (its calls ran or never will): any will do
                sender = ctx if client is None else ClientSender(client, ctx.retry)
                try:
                    n = await wire_fetch.forget_fetch(sender, ctx.keys, link.consumer, token, keep)
                except GlideMQError as exc:
                    link.events.emit("error", exc)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _BACKOFF[1])
                    continue
                self.pending.pop(0)
                pause = _BACKOFF[0]
                if n:
                    log.info(
                        "glidemq: queue %s: %d job(s) taken by a fetch whose answer was lost "
                        "went back to the queue",
                        link.name,
                        n,
                    )
        finally:
            self._running = False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
