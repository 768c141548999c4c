"""Checks the web faces' command-line tools make before serving: is the port free to
listen on, can the Valkey server be reached. Standard library only, so `-h` and bad input
need no web extra."""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Sequence
from typing import Any

__all__ = [
    "HEADER_TIMEOUT_S",
    "add_header_timeout_argument",
    "add_host_arguments",
    "allowed_from",
    "port_problem",
    "reachable",
    "serve",
]

HEADER_TIMEOUT_S = 10.0
"""How long a client may take to send a request's headers by default."""


def add_host_arguments(p: argparse.ArgumentParser) -> None:
    """--allow-host, for the allow-list of Host values (glidemq.web.hosts)."""
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="HOST",
        help="also answer requests for this Host: a name, an address, *.example.com or * "
        "(repeatable; default: the loopback names and the --bind address)",
    )


def add_header_timeout_argument(p: argparse.ArgumentParser) -> None:
    """--header-timeout: how long a client may take to send a request's headers."""
    p.add_argument(
        "--header-timeout",
        type=_seconds,
        default=HEADER_TIMEOUT_S,
        metavar="S",
        help="close a connection whose request headers are not complete after S seconds "
        f"(408; a slow client must not hold a connection; default {HEADER_TIMEOUT_S:g})",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600, got {text!r}")
    return value


def allowed_from(args: argparse.Namespace) -> list[str]:
    """--allow-host, and the --bind address unless it is every address (0.0.0.0, ::)."""
    hosts = list(args.allow_host or ())
    if args.bind not in ("0.0.0.0", "::", ""):
        hosts.append(args.bind)
    return hosts


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


def serve(
    app: Any,
    *,
    prog: str,
    banner: str,
    bind: str,
    port: int,
    addresses: Sequence[tuple[str, int]],
    url: str,
    with_auth: bool,
    when_down: str,
    mode: str = "",
    header_timeout: float = HEADER_TIMEOUT_S,
) -> None:
    """Print `banner` with the address served (and `mode`), warn about a non-loopback bind
    without auth and an unreachable Valkey (`when_down` says what answers 503), then run
    `app` under uvicorn until Ctrl-C or SIGTERM; a connection whose request headers take
    longer than `header_timeout` seconds is answered 408 and closed."""
    import uvicorn

    from .timeouts import with_header_timeout

    host = f"[{bind}]" if ":" in bind else bind
    print(f"{banner} on http://{host}:{port}/ for {url}{mode}", flush=True)
    if bind not in ("127.0.0.1", "localhost", "::1") and not with_auth:
        _warn(f"{prog}: warning: listening on {bind} without --basic-auth-file")
    if not reachable(addresses):
        later = f"{when_down} answer 503 until it is up"
        _warn(f"{prog}: warning: cannot reach Valkey at {url} now; {later}")
    config = uvicorn.Config(
        app,
        host=bind,
        port=port,
        log_level="warning",
        lifespan="on",
        http=with_header_timeout(header_timeout),
    )
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run()


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
