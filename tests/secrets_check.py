"""Helpers for the credential tests: a Valkey that wants a password, and what other local
users can read of a process tree (/proc/PID/environ and /proc/PID/cmdline)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psutil

from glidemq.server.valkey import EmbeddedValkey

__all__ = ["exposed", "password_server", "process_tree"]


@contextlib.contextmanager
def password_server() -> Iterator[tuple[EmbeddedValkey, str]]:
    """A private Valkey with `requirepass` set to a fresh secret; (server, secret)."""
    secret = f"pw-{uuid.uuid4().hex}"
    server = EmbeddedValkey().start()
    try:
        server.execute("CONFIG", "SET", "requirepass", secret)
        yield server, secret
    finally:
        server.stop()


def process_tree(pid: int) -> list[psutil.Process]:
    """`pid` and every live descendant, except Valkey servers."""
    root = psutil.Process(pid)
    out = [root]
    for proc in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE and "valkey" not in proc.name():
                out.append(proc)
    return out


def exposed(proc: psutil.Process, secret: str) -> list[str]:
    """Where `secret` can be read in `proc`: 'environ' and/or 'cmdline'."""
    found = []
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{proc.pid}/{part}", "rb") as f:
                if secret.encode() in f.read():
                    found.append(part)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found
