"""`glidemq-proxy`: the HTTP proxy as a standalone web server (uvicorn), bound to 127.0.0.1
unless told otherwise."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..cli.argtypes import port, positive_int
from ..cli.support import Parser
from ..client.connection import has_password, resolve_connection
from ..errors import ValidationError
from ..keys import validate_prefix, validate_queue_name
from ..web.serve import (
    add_header_timeout_argument,
    add_host_arguments,
    allowed_from,
    port_problem,
    serve,
)

# glidemq.proxy.state.DEFAULT_MAX_QUEUES / DEFAULT_MAX_STREAMS: that module needs the web
# extra, -h must not
MAX_QUEUES = 16
MAX_STREAMS = 256

__all__ = ["build_parser", "main"]

OK, FAILED, USAGE = 0, 1, 2
PROG = "glidemq-proxy"

_EXAMPLES = """examples:
  glidemq-proxy                                      # http://127.0.0.1:8081, $GLIDEMQ_URL
  glidemq-proxy --url-file /run/secrets/valkey-url --queue emails --queue reports
  glidemq-proxy --bind 0.0.0.0 --basic-auth-file /etc/glidemq/users

Routes and their JSON: GET /openapi.json, and docs/PROXY.md. The basic auth file holds
'user:password' lines (or hashes made by glidemq-dashboard --hash-password).
Exit codes: 0 stopped, 1 failed, 2 bad input."""


def build_parser() -> argparse.ArgumentParser:
    """The `glidemq-proxy` argument parser."""
    from ..version import __version__

    p = Parser(
        prog=PROG,
        description="Serve glidemq's queues over HTTP (JSON and server-sent events).",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    url = p.add_mutually_exclusive_group()
    url.add_argument("--url", help="Valkey server (default: $GLIDEMQ_URL, else 127.0.0.1:6379)")
    url.add_argument("--url-file", metavar="FILE", help="read the server URL from FILE")
    p.add_argument(
        "--durability",
        choices=("replicated", "fsync", "none"),
        help="answer an add only once replicas (WAIT) or the AOF (WAITAOF) confirmed it "
        "(docs/DURABILITY.md; default none)",
    )
    p.add_argument(
        "--replicas", type=int, metavar="N", help="replicas that must confirm (default 1)"
    )
    p.add_argument(
        "--durability-timeout",
        type=int,
        metavar="MS",
        help="how long a write waits for its confirmation (default 1000)",
    )
    p.add_argument("--prefix", default="glide", help="key prefix of the queues (default glide)")
    p.add_argument("--port", type=port, default=8081, help="HTTP port (default 8081)")
    p.add_argument(
        "--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1 only)"
    )
    add_host_arguments(p)
    add_header_timeout_argument(p)
    p.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="serve only this queue or broadcast (repeatable; default: every one; others 403)",
    )
    p.add_argument(
        "--basic-auth-file", metavar="FILE", help="ask for a user and password from FILE"
    )
    p.add_argument(
        "--max-queues",
        type=positive_int,
        default=MAX_QUEUES,
        help="queues kept open at once for adds, schedulers and stream reads; the least "
        f"recently used idle one is closed to make room (default {MAX_QUEUES})",
    )
    p.add_argument(
        "--max-streams",
        type=positive_int,
        default=MAX_STREAMS,
        help="server-sent event streams open at once; past it (or with too few file "
        f"descriptors left) a stream gets 503 with Retry-After (default {MAX_STREAMS})",
    )
    p.add_argument(
        "--max-wait",
        type=float,
        default=300.0,
        help="longest add-and-wait timeout a caller may ask, seconds (default 300)",
    )
    return p


def _url_from_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ValidationError("--url-file", f"cannot read {path}: {why}") from None
    if not text:
        raise ValidationError("--url-file", f"{path} is empty")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `glidemq-proxy`; returns the exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        from ..web.auth import BasicAuth
        from ..web.hosts import allowed_hosts_of
    except ImportError:
        print(
            f"{PROG}: error: install the proxy extra: pip install 'glidemq[proxy]'", file=sys.stderr
        )
        return USAGE
    try:
        raw = _url_from_file(args.url_file) if args.url_file else args.url
        try:
            conn = resolve_connection(raw)
        except ValidationError as exc:
            flag = "--url-file" if args.url_file else "--url"
            raise ValidationError(flag, exc.reason) from None
        try:
            conn = conn.with_durability(
                args.durability, replicas=args.replicas, timeout_ms=args.durability_timeout
            )
        except ValidationError as exc:
            raise ValidationError("--durability", exc.reason) from None
        prefix = validate_prefix(args.prefix)
        basic = BasicAuth.from_file(args.basic_auth_file) if args.basic_auth_file else None
        for name in args.queue or ():
            try:
                validate_queue_name(name)
            except ValidationError as exc:
                raise ValidationError("--queue", exc.reason) from None
        if not 0 < args.max_wait < float("inf"):
            raise ValidationError("--max-wait", "must be a positive number of seconds")
        try:
            allowed_hosts_of(allowed_from(args))
        except ValidationError as exc:
            raise ValidationError("--allow-host", exc.reason) from None
    except ValidationError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return USAGE
    problem = port_problem(args.bind, args.port)
    if problem is not None:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return USAGE

    from .app import create_app

    app = create_app(
        conn,
        prefix=prefix,
        queues=args.queue,
        basic_auth=basic,
        max_wait=args.max_wait,
        allowed_hosts=allowed_from(args),
        max_queues=args.max_queues,
        max_streams=args.max_streams,
    )
    if args.url and has_password(args.url):
        print(
            f"{PROG}: warning: the password in --url can be read by every local user in the "
            "process list; pass the URL in GLIDEMQ_URL or --url-file instead",
            file=sys.stderr,
            flush=True,
        )
    serve(
        app,
        prog=PROG,
        banner="glidemq proxy",
        bind=args.bind,
        port=args.port,
        addresses=conn.addresses,
        url=conn.url,
        with_auth=basic is not None,
        header_timeout=args.header_timeout,
        when_down="requests",
    )
    return OK


if __name__ == "__main__":
    raise SystemExit(main())
