"""Prometheus text (/metrics) and a health check (/health) served by the supervisor.

A tiny HTTP responder on the supervisor's own loop: it answers one short request per
connection, so it needs no thread and cannot hold the loop for long.
"""

from __future__ import annotations

import contextlib
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .supervisor import Supervisor

__all__ = ["MetricsServer", "render_metrics"]


def _line(name: str, value: float, labels: dict[str, object] | None = None) -> str:
    if labels:
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {value}"
    return f"{name} {value}"


def render_metrics(sup: Supervisor) -> str:
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
    rows = [
        _line("glidemq_queue_jobs", n, {"queue": q, "state": state})
        for q, counts in sorted(sup.queue_counts.items())
        for state, n in sorted(counts.items())
    ]
    metric("glidemq_queue_jobs", "gauge", "Jobs in each state, per queue.", rows)
    return "\n".join(out) + "\n"


class MetricsServer:
    """Listens on host:port; `handle()` answers one pending connection."""

    def __init__(self, host: str, port: int, sup: Supervisor) -> None:
        self.sup = sup
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def handle(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(0.5)
            try:
                request = conn.recv(4096).decode("latin-1")
            except OSError:
                return
            path = request.split(" ", 2)[1] if request.count(" ") >= 2 else "/"
            if path.startswith("/metrics"):
                status, body, ctype = (
                    "200 OK",
                    render_metrics(self.sup),
                    "text/plain; version=0.0.4",
                )
            elif path.startswith("/health"):
                ready = any(c.ready and not c.stopping for c in self.sup.children.values())
                ok = ready and self.sup.state == "running"
                status = "200 OK" if ok else "503 Service Unavailable"
                body, ctype = ("ok\n" if ok else "unavailable\n"), "text/plain"
            else:
                status, body, ctype = "404 Not Found", "not found\n", "text/plain"
            data = body.encode()
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
            ).encode()
            with contextlib.suppress(OSError):
                conn.sendall(head + data)

    def close(self) -> None:
        self.sock.close()
