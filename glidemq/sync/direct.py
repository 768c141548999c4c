"""The sync API's direct path for a plain add: the FCALL sent on a blocking valkey-glide
client (`glide_sync`) from the calling thread, without the hop to the sync loop.

A lone sync add is one round trip either way; the hop (a thread switch there and back, the
reply read on another loop) costs more than the call itself. Everything else, and every
add the direct path cannot make (deduplicated, traced, before the queue first connected,
on a memory server), goes through the async Queue on the sync loop. A failure the call
did not run through (no library on the node, a closed client, a refusal before running)
is retried there too, which reloads the library or reconnects; a failure that leaves it
unknown whether the add happened is raised as ConnectionError, as the async path does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Any

from glide import TimeoutError as GlideTimeout

from ..client import outage
from ..client.connection import ConnectionOptions, client_configuration
from ..client.retry import Failure, classify, to_glidemq_error
from ..errors import GlideMQError, OperationTimeoutError

__all__ = ["CLIENT_PREFIX", "DirectClient", "available"]

_glide_sync: Any = None
try:
    import glide_sync

    _glide_sync = glide_sync
except ImportError:  # pragma: no cover - a dependency; without it every add takes the hop
    pass

CLIENT_PREFIX = "glidemq-queue-"
"""The start of a direct client's name; the rest is its queue's."""
_PROBE_TIMEOUT = 1.0  # seconds; the caller's own connect runs meanwhile and takes longer
_abandoned: list[Any] = []  # a parent's clients in a forked child: never touched, never freed


def available() -> bool:
    """Whether the blocking valkey-glide client is installed."""
    return _glide_sync is not None and os.environ.get("GLIDEMQ_SYNC_DIRECT", "1") != "0"


def _accepts(addresses: tuple[tuple[str, int], ...]) -> bool:
    """Whether one of the addresses accepts a TCP connection within a second."""
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=_PROBE_TIMEOUT).close()
        except OSError:
            continue
        return True
    return False


class Retryable(GlideMQError):
    """The direct call did not run: send it through the async path instead."""


class DirectClient:
    """One blocking client per process for one sync Queue; safe to share between threads."""

    def __init__(
        self, connection: ConnectionOptions, name: str, timeout: float | None, *, queue: str
    ) -> None:
        if timeout is not None:  # the sync call's own limit bounds the blocking call
            limit = max(1, int(timeout * 1000))
            connection = replace(
                connection, request_timeout_ms=min(connection.request_timeout_ms, limit)
            )
        self.timeout = timeout
        self.connection = connection
        self.name = name
        """The client's name on the server."""
        self.queue = queue
        """The queue's name, for errors."""
        self._client: Any = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _get(self) -> Any:
        client = self._client
        if client is not None and self._pid == os.getpid():
            return client
        with self._lock:
            if self._pid != os.getpid():
                _abandoned.append(self._client)  # the parent's: its threads did not fork
                self._client, self._pid = None, os.getpid()
            if self._client is None:
                glide: Any = _glide_sync
                config = client_configuration(self.connection, name=self.name)
                if self.connection.cluster:
                    self._client = glide.GlideClusterClient.create(config)
                else:
                    self._client = glide.GlideClient.create(config)
            return self._client

    @property
    def cold(self) -> bool:
        """Whether this process has no client yet (the first call opens one)."""
        return self._client is None or self._pid != os.getpid()

    def warm(self) -> None:
        """Open the client now if there is none, and send it a PING (a new client's first
        call costs milliseconds more than the next). Skipped when no address accepts a TCP
        connection: valkey-glide would retry a refused one for seconds, and the caller's
        own connect reports the refusal at once. Any failure is left for the first call."""
        if not self.cold or not _accepts(self.connection.addresses):
            return
        with contextlib.suppress(Exception):
            self._get().ping()

    def fcall(self, function: str, keys: list[str], args: list[Any], safe: bool) -> Any:
        """Send one FCALL; raises Retryable when the async path should send it instead,
        else the glidemq error for the failure."""
        try:
            client = self._get()
        except Exception as exc:  # cannot connect this way: the async path says why
            raise Retryable(str(exc)) from exc
        began = time.time()
        try:
            reply = client.fcall(function, keys=keys, arguments=args)
        except Exception as exc:
            kind = classify(exc)
            if kind is Failure.CLOSED:
                self.reset()
            where = self.connection.where
            if kind is Failure.AMBIGUOUS:
                outage.failed(where, began)
            if kind in (Failure.NOT_RUN, Failure.MISSING_LIBRARY, Failure.CLOSED) or (
                safe and kind is Failure.AMBIGUOUS
            ):
                raise Retryable(str(exc)) from exc
            if isinstance(exc, GlideTimeout):
                raise OperationTimeoutError(self._timed_out(function)) from exc
            error = to_glidemq_error(exc, f"{function} on queue {self.queue!r}")
            lost = outage.describe(where)
            raise type(error)(f"{lost}: {error}" if lost else str(error)) from exc
        if outage.OPEN:
            outage.ok(self.connection.where)
        return reply

    def _timed_out(self, function: str) -> str:
        """What a call that got no reply tells: the real time-out, whether the server
        still accepts connections, since when calls fail."""
        where = self.connection.where
        wait = self.connection.request_timeout_ms / 1000
        queue = self.queue
        text = f"{function} on queue {queue!r}: no reply from {where} within {wait:g} s"
        if not _accepts(self.connection.addresses):
            text += " (the server does not accept connections)"
        lost = outage.describe(where)
        return f"{text}{'; ' + lost if lost else ''}; it may still take effect"

    def reset(self) -> None:
        """Drop the client (closed or broken); the next call opens another."""
        with self._lock:
            client, self._client = self._client, None
            forked = self._pid != os.getpid()
        if client is not None and not forked:
            with contextlib.suppress(Exception):  # already closed
                client.close()

    def close(self) -> None:
        """Close the client. Idempotent."""
        self.reset()
