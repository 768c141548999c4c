"""Checks the web faces' command-line tools make before serving: is the port free to
listen on, can the Valkey server be reached. Standard library only, so `-h` and bad input
need no web extra."""

from __future__ import annotations

import socket
from collections.abc import Sequence

__all__ = ["port_problem", "reachable"]


def port_problem(host: str, number: int) -> str | None:
    """None when `host:number` can be listened on, else why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, number))
        except OSError as exc:
            return f"cannot listen on {host}:{number}: {exc.strerror or exc}"
    return None


def reachable(addresses: Sequence[tuple[str, int]], timeout: float = 2.0) -> bool:
    """Whether any of `addresses` accepts a TCP connection."""
    for host, number in addresses:
        try:
            with socket.create_connection((host, number), timeout=timeout):
                return True
        except OSError:
            continue
    return False
