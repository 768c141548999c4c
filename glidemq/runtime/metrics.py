"""Prometheus text (/metrics) and a health check (/health) served by the supervisor.

A tiny HTTP responder on the supervisor's own loop, without a thread (the supervisor forks;
a second thread could hold a lock at fork time and deadlock the child). Every socket is
non-blocking and registered with the loop's selector: a read or write takes what is there
and returns, so an idle, slow or hostile client costs the loop nothing while it waits. Each
connection has REQUEST_TIMEOUT to send its request and take the answer; at most
MAX_CONNECTIONS are open (a new one closes the oldest once that one had EVICT_AFTER to
speak; until then new ones wait in the listen backlog); one request per connection.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Mapping
from functools import partial
from typing import Any, Protocol

from ..admin.prometheus import queue_metrics
from ..queue.backlog import Backlog

__all__ = ["MAX_CONNECTIONS", "REQUEST_TIMEOUT", "MetricsServer", "Observed", "render_metrics"]


class _Child(Protocol):
    slot: int
    pid: int
    stats: dict[str, Any]
    ready: bool
    stopping: bool


class Observed(Protocol):
    """What the metrics read of the supervisor (`glidemq.runtime.supervisor.Supervisor`)."""

    target: int
    state: str
    queue_counts: dict[str, dict[str, int]]
    queue_backlog: dict[str, dict[str, Any]]  # queue -> Backlog.as_dict()

    @property
    def children(self) -> Mapping[int, _Child]: ...

    def totals(self) -> dict[str, int]: ...


MAX_CONNECTIONS = 256
REQUEST_TIMEOUT = 2.0  # seconds for a client to send its request and read the answer
EVICT_AFTER = 0.25  # a connection this old may be closed to make room for a new one
MAX_REQUEST = 8192  # bytes of request line and headers
_ACCEPT_PER_TURN = 256


def _line(name: str, value: float, labels: dict[str, object] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {value}"
    return f"{name} {value}"


def render_metrics(sup: Observed) -> str:
    """The supervisor's counters in the Prometheus text format."""
    t = sup.totals()
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, rows: list[str]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(rows)

    metric(
        "glidemq_jobs_completed_total",
        "counter",
        "Jobs completed by all worker processes.",
        [_line("glidemq_jobs_completed_total", t["completed"])],
    )
    metric(
        "glidemq_jobs_failed_total",
        "counter",
        "Job attempts that failed.",
        [_line("glidemq_jobs_failed_total", t["failed"])],
    )
    metric(
        "glidemq_jobs_active",
        "gauge",
        "Jobs running now.",
        [_line("glidemq_jobs_active", t["active"])],
    )
    metric(
        "glidemq_processes",
        "gauge",
        "Worker processes alive.",
        [_line("glidemq_processes", t["processes"])],
    )
    metric(
        "glidemq_processes_target",
        "gauge",
        "Worker processes wanted.",
        [_line("glidemq_processes_target", sup.target)],
    )
    metric(
        "glidemq_restarts_total",
        "counter",
        "Worker processes replaced after dying or hanging.",
        [_line("glidemq_restarts_total", t["restarts"])],
    )
    children = sorted(sup.children.values(), key=lambda c: c.slot)
    for key, name, help_text in (
        ("completed", "glidemq_process_jobs_completed", "Jobs completed by one process."),
        ("failed", "glidemq_process_jobs_failed", "Failed attempts in one process."),
        ("active", "glidemq_process_jobs_active", "Jobs running in one process."),
        ("rss", "glidemq_process_rss_bytes", "Resident memory of one process."),
    ):
        metric(
            name,
            "gauge",
            help_text,
            [
                _line(name, int(c.stats.get(key, 0)), {"slot": c.slot, "pid": c.pid})
                for c in children
            ],
        )
    backlogs = {q: Backlog.from_dict(d) for q, d in sup.queue_backlog.items()}
    out.extend(queue_metrics(sup.queue_counts, backlogs))
    return "\n".join(out) + "\n"


class _Conn:
    __slots__ = ("deadline", "inbox", "opened", "outbox", "sock")

    def __init__(self, sock: socket.socket, opened: float) -> None:
        self.sock = sock
        self.opened = opened
        self.deadline = opened + REQUEST_TIMEOUT
        self.inbox = b""
        self.outbox: bytes | None = None


def _response(status: str, body: str, ctype: str = "text/plain", head_only: bool = False) -> bytes:
    data = body.encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head if head_only else head + data


class MetricsServer:
    """Listens on host:port with its sockets in the supervisor's `selector`; the loop calls
    the registered callbacks when a socket is ready and `expire()` on every turn."""

    def __init__(
        self, host: str, port: int, sup: Observed, selector: selectors.BaseSelector
    ) -> None:
        self.sup = sup
        self.selector = selector
        self.conns: dict[int, _Conn] = {}  # by fd, oldest first
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.accepting = False
        self._resume()

    def _resume(self) -> None:
        if not self.accepting:
            self.selector.register(self.sock, selectors.EVENT_READ, self._on_accept)
            self.accepting = True

    def _pause(self) -> None:
        # full of young connections: leave new ones in the backlog until one goes
        if self.accepting:
            self.selector.unregister(self.sock)
            self.accepting = False

    def _make_room(self, now: float) -> bool:
        """Close the oldest connection if it had its chance; whether there is room now."""
        if len(self.conns) < MAX_CONNECTIONS:
            return True
        oldest = next(iter(self.conns.values()))
        if now - oldest.opened < EVICT_AFTER:
            return False
        self._on_ready(oldest, 0)  # serve what it sent meanwhile: only the silent are cut off
        if self.conns.get(oldest.sock.fileno()) is oldest:
            self._drop(oldest)
        return True

    def fileno(self) -> int:
        return self.sock.fileno()

    def _on_accept(self, mask: int) -> None:
        for _ in range(_ACCEPT_PER_TURN):
            now = time.monotonic()
            if not self._make_room(now):
                self._pause()
                return
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, aborted handshake: try again next turn
                return
            sock.setblocking(False)
            conn = _Conn(sock, now)
            self.conns[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ, partial(self._on_ready, conn))
            self._read(conn)  # a quick client has sent its request already

    def _on_ready(self, conn: _Conn, mask: int) -> None:
        if conn.outbox is None:
            self._read(conn)
        else:
            self._write(conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.inbox += data
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            end = conn.inbox.find(b"\n\n")
        if end < 0:
            if len(conn.inbox) > MAX_REQUEST:
                self._answer(conn, _response("431 Request Header Fields Too Large", "too large\n"))
            return
        self._answer(conn, self._route(conn.inbox[:end]))

    def _route(self, head: bytes) -> bytes:
        line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[1].startswith("/"):
            return _response("400 Bad Request", "bad request\n")
        method, path = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return _response("405 Method Not Allowed", "method not allowed\n")
        head_only = method == "HEAD"
        if path.startswith("/metrics"):
            text = render_metrics(self.sup)
            return _response("200 OK", text, "text/plain; version=0.0.4", head_only)
        if path.startswith("/health"):
            ready = any(c.ready and not c.stopping for c in self.sup.children.values())
            if ready and self.sup.state == "running":
                return _response("200 OK", "ok\n", head_only=head_only)
            return _response("503 Service Unavailable", "unavailable\n", head_only=head_only)
        return _response("404 Not Found", "not found\n", head_only=head_only)

    def _answer(self, conn: _Conn, response: bytes) -> None:
        conn.outbox = response
        with contextlib.suppress(KeyError, ValueError):
            self.selector.modify(conn.sock, selectors.EVENT_WRITE, partial(self._on_ready, conn))
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.outbox is not None
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        conn.outbox = conn.outbox[sent:]
        if not conn.outbox:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0 and self.conns.get(fd) is conn:
            del self.conns[fd]
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)
        conn.sock.close()
        if not self.accepting and len(self.conns) < MAX_CONNECTIONS:
            self._resume()

    def wake_in(self) -> float | None:
        """Seconds until `expire()` has something to do (None: nothing pending)."""
        if not self.conns:
            return None
        oldest = next(iter(self.conns.values()))
        due = oldest.opened + EVICT_AFTER if not self.accepting else oldest.deadline
        return max(0.0, due - time.monotonic())

    def expire(self) -> None:
        """Close connections past their deadline (the oldest come first)."""
        now = time.monotonic()
        for conn in list(self.conns.values()):
            if conn.deadline > now:
                break
            self._drop(conn)
        if not self.accepting and self._make_room(now):
            self._resume()

    def close(self) -> None:
        """Close every socket (also what a forked child does with its copies)."""
        for conn in self.conns.values():
            conn.sock.close()
        self.conns.clear()
        self.sock.close()
