"""`glidemq exporter`: the queue metrics of `glidemq-run --metrics-port`, served by a process
that runs no worker, so that an autoscaler still sees the backlog of a fleet scaled to zero
(docs/DEPLOY.md).

A scrape reads the queues at most once per `min_interval` (concurrent scrapes share one
read): per queue one `glidemq_getCounts`, one `glidemq_backlog` and one ZCARD. When a read
fails, the queue families are left out and `glidemq_exporter_up` is 0, so a scaler sees no
data instead of an empty queue. The HTTP side is small and defensive: GET and HEAD only, one
request per connection, REQUEST_TIMEOUT to send it, MAX_REQUEST bytes of headers, at most
MAX_CONNECTIONS at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..queue.backlog import Backlog
from .prometheus import family, queue_metrics, sample
from .session import Admin

__all__ = ["MAX_CONNECTIONS", "MAX_REQUEST", "REQUEST_TIMEOUT", "Exporter", "Reading"]

log = logging.getLogger("glidemq.exporter")

REQUEST_TIMEOUT = 2.0  # seconds for a client to send its request and take the answer
READ_TIMEOUT = 10.0  # seconds one read of all the queues may take
MAX_REQUEST = 8192  # bytes of request line and headers
MAX_CONNECTIONS = 256
_AT_ONCE = 16  # queues read concurrently


@dataclass
class Reading:
    """One read of the queues: their counts and backlogs, or the error that stopped it."""

    at: float  # monotonic
    seconds: float
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    backlogs: dict[str, Backlog] = field(default_factory=dict)
    error: str | None = None


class Exporter:
    """Reads `queues` (None: every queue under the admin's prefix, listed again every
    `discover_interval` seconds) through `admin` and renders them for Prometheus."""

    def __init__(
        self,
        admin: Admin,
        queues: Sequence[str] | None = None,
        *,
        min_interval: float = 1.0,
        discover_interval: float = 60.0,
    ) -> None:
        self.admin = admin
        self.queues = list(queues) if queues else None
        self.min_interval = min_interval
        self.discover_interval = discover_interval
        self.failed_reads = 0
        self.last: Reading | None = None
        self._pending: asyncio.Future[Reading] | None = None
        self._names: list[str] = []
        self._listed_at: float | None = None
        self._connections = 0

    async def _names_now(self) -> list[str]:
        if self.queues is not None:
            return self.queues
        now = time.monotonic()
        if self._listed_at is None or now - self._listed_at >= self.discover_interval:
            self._names = await self.admin.queue_names()
            self._listed_at = now
        return self._names

    async def _read_all(self) -> Reading:
        start = time.monotonic()
        reading = Reading(at=start, seconds=0.0)
        gate = asyncio.Semaphore(_AT_ONCE)

        async def one(name: str) -> None:
            async with gate:
                view = await self.admin.view(name, must_exist=False)
                counts = await view.get_job_counts()
                reading.counts[name] = counts.as_dict()
                reading.backlogs[name] = await view.get_backlog()

        try:
            names = await self._names_now()
            await asyncio.wait_for(asyncio.gather(*(one(n) for n in names)), READ_TIMEOUT)
        except Exception as exc:  # any failed read is reported, never served as empty queues
            self.failed_reads += 1
            reading = Reading(at=start, seconds=0.0, error=f"{type(exc).__name__}: {exc}")
            if self.last is None or self.last.error is None:
                log.warning("cannot read the queues: %s", reading.error)
        reading.seconds = time.monotonic() - start
        self.last = reading
        return reading

    async def reading(self) -> Reading:
        """The last reading if it is younger than `min_interval`, else a new one (scrapes that
        come while one is under way wait for it)."""
        last = self.last
        if last is not None and time.monotonic() - last.at < self.min_interval:
            return last
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self._read_all())
        return await asyncio.shield(self._pending)

    async def metrics(self) -> str:
        """The Prometheus text of a reading."""
        r = await self.reading()
        out = family(
            "glidemq_exporter_up",
            "gauge",
            "1 when the last read of the queues succeeded.",
            [sample("glidemq_exporter_up", 0 if r.error else 1)],
        )
        out += family(
            "glidemq_exporter_read_duration_seconds",
            "gauge",
            "How long the last read of the queues took.",
            [sample("glidemq_exporter_read_duration_seconds", round(r.seconds, 6))],
        )
        out += family(
            "glidemq_exporter_read_failures_total",
            "counter",
            "Reads of the queues that failed.",
            [sample("glidemq_exporter_read_failures_total", self.failed_reads)],
        )
        if r.error is None:
            out += queue_metrics(r.counts, r.backlogs)
        return "\n".join(out) + "\n"

    # -- HTTP --------------------------------------------------------------------------------

    async def serve(self, host: str, port: int) -> asyncio.Server:
        """Start answering HTTP on host:port (`/metrics`, `/health`); the caller closes it."""
        return await asyncio.start_server(self._handle, host, port, limit=MAX_REQUEST)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        try:
            if self._connections > MAX_CONNECTIONS:
                return
            head = await asyncio.wait_for(_read_head(reader), REQUEST_TIMEOUT)
            response = b"" if head is None else await self._route(head)
            if response:
                writer.write(response)
                await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections -= 1
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), REQUEST_TIMEOUT)

    async def _route(self, head: bytes | int) -> bytes:
        if isinstance(head, int):
            return _response("431 Request Header Fields Too Large", "too large\n")
        parts = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[1].startswith("/"):
            return _response("400 Bad Request", "bad request\n")
        method, path = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response("405 Method Not Allowed", "method not allowed\n")
        head_only = method == "HEAD"
        if path == "/metrics":
            text = await self.metrics()
            return _response("200 OK", text, "text/plain; version=0.0.4", head_only)
        if path == "/health":
            r = await self.reading()
            if r.error is None:
                return _response("200 OK", "ok\n", head_only=head_only)
            return _response("503 Service Unavailable", f"{r.error}\n", head_only=head_only)
        return _response("404 Not Found", "not found\n", head_only=head_only)


async def _read_head(reader: asyncio.StreamReader) -> bytes | int | None:
    """The request line and headers; MAX_REQUEST (an int) when they are too long; None when
    the client left before the end."""
    head = b""
    while True:
        try:
            line = await reader.readline()
        except (ValueError, asyncio.LimitOverrunError):
            return MAX_REQUEST
        if not line:
            return None
        head += line
        if len(head) > MAX_REQUEST:
            return MAX_REQUEST
        if line in (b"\r\n", b"\n"):
            return head


def _response(status: str, body: str, ctype: str = "text/plain", head_only: bool = False) -> bytes:
    data = body.encode()
    top = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return top if head_only else top + data
