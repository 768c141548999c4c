"""`glidemq-dashboard`: the dashboard as a standalone web server (uvicorn), bound to
127.0.0.1 unless told otherwise."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..cli.argtypes import port, positive_int
from ..cli.support import Parser
from ..client.connection import resolve_connection
from ..errors import ValidationError
from ..keys import validate_prefix
from ..web.serve import (
    add_header_timeout_argument,
    add_host_arguments,
    allowed_from,
    port_problem,
    serve,
)

__all__ = ["build_parser", "main"]

OK, FAILED, USAGE = 0, 1, 2
MAX_STREAMS = 256  # glidemq.web.capacity.DEFAULT_MAX_STREAMS (-h needs no web extra)

_EXAMPLES = """examples:
  glidemq-dashboard                                   # http://127.0.0.1:8080, $GLIDEMQ_URL
  glidemq-dashboard --url valkey://10.0.0.5:6379 --read-only
  glidemq-dashboard --bind 0.0.0.0 --basic-auth-file /etc/glidemq/users

The basic auth file holds 'user:password' lines (or 'user:pbkdf2_sha256$...' hashes made by
--hash-password). Exit codes: 0 stopped, 1 failed, 2 bad input."""


def build_parser() -> argparse.ArgumentParser:
    """The `glidemq-dashboard` argument parser."""
    from ..version import __version__

    p = Parser(
        prog="glidemq-dashboard",
        description="Serve the glidemq web dashboard.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"glidemq-dashboard {__version__}")
    p.add_argument("--url", help="Valkey server (default: $GLIDEMQ_URL, else 127.0.0.1:6379)")
    p.add_argument("--prefix", default="glide", help="key prefix of the queues (default glide)")
    p.add_argument("--port", type=port, default=8080, help="HTTP port (default 8080)")
    p.add_argument(
        "--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1 only)"
    )
    add_host_arguments(p)
    add_header_timeout_argument(p)
    p.add_argument("--read-only", action="store_true", help="show, never act (actions get 403)")
    p.add_argument(
        "--basic-auth-file", metavar="FILE", help="ask for a user and password from FILE"
    )
    p.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="show only this queue (repeatable; default: every queue found)",
    )
    p.add_argument(
        "--refresh", type=float, default=2.0, help="seconds between live updates (default 2)"
    )
    p.add_argument(
        "--max-streams",
        type=positive_int,
        default=MAX_STREAMS,
        help="live feeds open at once; past it (or with too few file descriptors left) a "
        f"feed gets 503 with Retry-After (default {MAX_STREAMS})",
    )
    p.add_argument(
        "--hash-password",
        action="store_true",
        help="read a password from stdin, print its hash for the auth file, and exit",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `glidemq-dashboard`; returns the exit code."""
    prog = "glidemq-dashboard"
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        import jinja2  # noqa: F401  # the pages; imported here so --help works without it

        from ..web.auth import BasicAuth, hash_password
        from ..web.hosts import allowed_hosts_of
        from .app import MAX_REFRESH, MIN_REFRESH
    except ImportError:
        print(
            f"{prog}: error: install the dashboard extra: pip install 'glidemq[dashboard]'",
            file=sys.stderr,
        )
        return USAGE
    if args.hash_password:
        password = sys.stdin.readline().rstrip("\n")
        if not password:
            print(f"{prog}: error: no password on stdin", file=sys.stderr)
            return USAGE
        print(hash_password(password))
        return OK
    try:
        try:
            conn = resolve_connection(args.url)
        except ValidationError as exc:
            raise ValidationError("--url", exc.reason) from None
        prefix = validate_prefix(args.prefix)
        basic = BasicAuth.from_file(args.basic_auth_file) if args.basic_auth_file else None
        if not MIN_REFRESH <= args.refresh <= MAX_REFRESH:  # also refuses nan
            raise ValidationError(
                "--refresh", f"must be a number of seconds from {MIN_REFRESH:g} to {MAX_REFRESH:g}"
            )
        try:
            allowed_hosts_of(allowed_from(args))
        except ValidationError as exc:
            raise ValidationError("--allow-host", exc.reason) from None
    except ValidationError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return USAGE
    problem = port_problem(args.bind, args.port)
    if problem is not None:
        print(f"{prog}: error: {problem}", file=sys.stderr)
        return USAGE

    from .app import create_app

    try:
        app = create_app(
            conn,
            prefix=prefix,
            read_only=args.read_only,
            basic_auth=basic,
            queues=args.queue,
            refresh=args.refresh,
            allowed_hosts=allowed_from(args),
            max_streams=args.max_streams,
        )
    except ValidationError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return USAGE
    mode = " (read-only)" if args.read_only else ""
    serve(
        app,
        prog=prog,
        banner="glidemq dashboard",
        bind=args.bind,
        port=args.port,
        addresses=conn.addresses,
        url=conn.url,
        mode=mode,
        with_auth=basic is not None,
        header_timeout=args.header_timeout,
        when_down="pages",
    )
    return OK


if __name__ == "__main__":
    raise SystemExit(main())
