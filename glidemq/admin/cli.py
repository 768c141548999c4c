"""`glidemq`: look inside queues and act on them from a shell (docs/ADMIN.md).

Every command reads or acts through `glidemq.admin.session.Admin` and only formats what it
returns: tables for people, `--json` for scripts. Exit codes: 0 done, 1 failed (an unexpected
error, the server failing a call), 2 bad input (flags, unknown queue or job, a job in the
wrong state, a destructive command without `--yes`), 6 the server cannot be reached (as
glidemq-run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import orjson

from ..cli.argtypes import duration_ms, non_negative_float, port, positive_int
from ..cli.support import EXIT_UNREACHABLE, Parser, unreachable
from ..client.connection import ConnectionOptions, has_password, resolve_connection
from ..client.context import now_ms
from ..errors import (
    ConnectionError,
    GlideMQError,
    JobNotFoundError,
    QueueNotFoundError,
    ValidationError,
)
from ..keys import validate_queue_name
from ..queue.queries import state_name
from . import format as fmt
from .actions import CLEAN_STATES, RETRY_STATES
from .base import JOB_STATES
from .exporter import Exporter
from .model import ActionResult, to_jsonable
from .session import Admin

__all__ = ["main"]

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, EXIT_UNREACHABLE


class _Usage(Exception):
    """Bad input found after parsing; the message is the one line to print."""


_EXAMPLES = """examples:
  glidemq queues
  glidemq status emails
  glidemq jobs emails --state failed --limit 20 --search welcome
  glidemq job emails 42
  glidemq retry emails 42 43            glidemq retry emails --state failed
  glidemq update-data emails 42 '{"to": "ada@example.com"}'
  glidemq clean emails --state completed --grace 1h --yes
  glidemq events emails --follow
  glidemq groups emails                 glidemq pause-group emails tenant-42
  glidemq exporter --queue emails --host 0.0.0.0 --port 9100

The server is --url, else $GLIDEMQ_URL, else valkey://127.0.0.1:6379. Every command takes
--json. Exit codes: 0 done, 1 failed, 2 bad input, 6 server unreachable."""


def _common() -> Parser:
    # SUPPRESS: given before or after the command, neither place resets the other.
    p = Parser(add_help=False, allow_abbrev=False)
    p.add_argument("--url", default=argparse.SUPPRESS, help="server (default: $GLIDEMQ_URL)")
    p.add_argument("--prefix", default=argparse.SUPPRESS, help="key prefix (default: glide)")
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    return p


def build_parser() -> argparse.ArgumentParser:
    """The `glidemq` argument parser."""
    from ..version import __version__

    common = _common()
    p = Parser(
        prog="glidemq",
        description="Look inside glidemq queues and act on them.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"glidemq {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help, description=help, parents=[common], allow_abbrev=False
        )

    def queue_arg(c: argparse.ArgumentParser) -> None:
        c.add_argument("queue", metavar="QUEUE")

    def confirm(c: argparse.ArgumentParser) -> None:
        c.add_argument("--yes", "-y", action="store_true", help="do it without asking")

    command("queues", "every queue under the prefix with its counts, paused, workers")
    queue_arg(command("status", "counts, workers, throughput, limits, schedulers of a queue"))
    c = command("jobs", "list a queue's jobs (newest finished first)")
    queue_arg(c)
    c.add_argument(
        "--state",
        action="append",
        type=state_name,
        choices=JOB_STATES,
        help="only this state (repeatable; dead_letter or dead-letter alike)",
    )
    c.add_argument("--limit", type=positive_int, default=20, help="jobs per page (default 20)")
    c.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")
    c.add_argument("--search", metavar="TEXT", help="names containing TEXT (or a glob: a*b)")
    c = command("job", "one job with every field, logs, progress, stacktrace, parent, children")
    queue_arg(c)
    c.add_argument("id", metavar="ID")
    c.add_argument("--logs", type=int, default=100, metavar="N", help="last N log lines (100)")
    c = command("retry", "send failed / dead-letter / completed jobs back to waiting")
    queue_arg(c)
    c.add_argument("ids", nargs="*", metavar="ID")
    c.add_argument(
        "--state",
        type=state_name,
        choices=RETRY_STATES,
        help="every job in this state (not with IDs)",
    )
    c.add_argument("--limit", type=positive_int, help="with --state: at most this many")
    c = command("remove", "delete jobs that are not running")
    queue_arg(c)
    c.add_argument("ids", nargs="+", metavar="ID")
    confirm(c)
    c = command("promote", "run delayed jobs now")
    queue_arg(c)
    c.add_argument("ids", nargs="+", metavar="ID")
    c = command("revoke", "cancel jobs: not started ones fail now, running ones are stopped")
    queue_arg(c)
    c.add_argument("ids", nargs="+", metavar="ID")
    c = command("update-data", "replace the data of a job no worker has taken yet")
    queue_arg(c)
    c.add_argument("id", metavar="ID")
    c.add_argument("data", metavar="JSON", help="the new data as JSON; - reads it from stdin")
    queue_arg(command("pause", "stop workers from taking new jobs"))
    queue_arg(command("resume", "let workers take jobs again"))
    c = command("clean", "remove old jobs of one state")
    queue_arg(c)
    c.add_argument("--state", type=state_name, required=True, choices=CLEAN_STATES)
    c.add_argument(
        "--grace", type=duration_ms, required=True, help="only jobs older than this: 30s, 1h, 2d"
    )
    c.add_argument("--limit", type=positive_int, help="at most this many (default: all)")
    confirm(c)
    c = command("drain", "remove every job waiting to run (running ones are left alone)")
    queue_arg(c)
    c.add_argument("--delayed", action="store_true", help="delayed jobs too")
    confirm(c)
    c = command("obliterate", "delete the queue and everything in it")
    queue_arg(c)
    confirm(c)
    c.add_argument("--force", action="store_true", help="confirm, and even while jobs run")
    c = command("events", "the queue's recent events, or a live tail with --follow")
    queue_arg(c)
    c.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    c.add_argument("--count", type=positive_int, default=20, help="recent events (default 20)")
    queue_arg(command("schedulers", "the queue's job schedulers"))
    queue_arg(command("groups", "the queue's groups: waiting, parked, active, paused, limits"))
    c = command(
        "exporter",
        "serve the queues' counts and backlog as Prometheus metrics, with no worker running",
    )
    c.add_argument(
        "--queue",
        action="append",
        metavar="QUEUE",
        help="a queue to export (repeatable; default: every queue, listed again every minute)",
    )
    c.add_argument("--port", type=port, default=9100, help="HTTP port (default 9100)")
    c.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    c.add_argument(
        "--min-interval",
        type=non_negative_float,
        default=1.0,
        metavar="SECONDS",
        help="read the queues at most this often; scrapes in between get the last read (1)",
    )
    for name, what in (("pause-group", "stop one group's jobs from starting"),
                       ("resume-group", "let one group's jobs start again")):  # fmt: skip
        c = command(name, what)
        queue_arg(c)
        c.add_argument("key", metavar="GROUP")
    return p


def _out(text: str) -> None:
    print(text, flush=True)


def _note(text: str) -> None:
    print(f"glidemq: note: {text}", file=sys.stderr, flush=True)


def _emit(args: argparse.Namespace, value: Any, text: str) -> None:
    if getattr(args, "json", False):
        _out(orjson.dumps(to_jsonable(value), option=orjson.OPT_INDENT_2).decode())
    else:
        _out(text)


def _confirm(args: argparse.Namespace, what: str) -> None:
    """Go on only with --yes / --force, or a 'y' typed at a terminal."""
    if args.yes or getattr(args, "force", False):
        return
    if getattr(args, "json", False) or not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise _Usage(f"{what}: pass --yes to confirm")
    print(f"{what}. Go on? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise _Usage("cancelled")


def _results(args: argparse.Namespace, results: list[ActionResult]) -> int:
    _emit(args, results, fmt.action_results(results))
    return OK if all(r.ok for r in results) else USAGE


async def _follow(admin: Admin, args: argparse.Namespace) -> int:
    await admin.view(args.queue)  # an unknown queue is an error, not an empty tail
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        async with admin.follow(args.queue) as feed:
            print(f"following events of {args.queue!r}; Ctrl-C stops", file=sys.stderr, flush=True)
            async for ev in feed:
                if getattr(args, "json", False):
                    _out(orjson.dumps(to_jsonable(ev)).decode())
                else:
                    _out(fmt.event_line(ev))
    except asyncio.CancelledError:
        return OK
    return OK


async def _run(args: argparse.Namespace, conn: ConnectionOptions) -> int:
    prefix = getattr(args, "prefix", "glide")
    if args.command == "exporter":  # connects on its first read, and again after a failure
        admin = Admin(conn, prefix=prefix)
        try:
            return await _exporter(admin, args, now_ms())
        finally:
            await admin.close()
    async with Admin(conn, prefix=prefix) as admin:
        code = await _COMMANDS[args.command](admin, args, now_ms())
    return OK if code is None else code


# One function per command: it prints what it found or did; an exit code when not OK.
_Command: TypeAlias = Callable[[Admin, argparse.Namespace, int], Awaitable[int | None]]


async def _queues(admin: Admin, args: argparse.Namespace, now: int) -> None:
    rows = await admin.queues()
    _emit(args, rows, fmt.queues(rows))


async def _status(admin: Admin, args: argparse.Namespace, now: int) -> None:
    status = await admin.status(args.queue)
    _emit(args, status, fmt.queue_status(status))


async def _jobs(admin: Admin, args: argparse.Namespace, now: int) -> None:
    if args.offset < 0:
        raise _Usage("--offset: must be >= 0")
    page = await admin.jobs(
        args.queue, args.state or (), limit=args.limit, offset=args.offset, search=args.search
    )
    _emit(args, page, fmt.job_page(page, now))


async def _job(admin: Admin, args: argparse.Namespace, now: int) -> None:
    detail = await admin.job(args.queue, args.id, log_lines=max(0, args.logs))
    _emit(args, detail, fmt.job_detail(detail, now))


async def _retry(admin: Admin, args: argparse.Namespace, now: int) -> int | None:
    if args.ids and args.state:
        raise _Usage("retry: name job IDs or --state, not both")
    if args.limit is not None and not args.state:
        raise _Usage("retry: --limit goes with --state")
    if args.state:
        bulk = await admin.retry_state(args.queue, args.state, args.limit)
        _emit(args, bulk, fmt.bulk_result(bulk))
        return None
    if args.ids:
        return _results(args, await admin.retry(args.queue, args.ids))
    raise _Usage("retry: name job IDs or --state failed|dead_letter|completed")


async def _remove(admin: Admin, args: argparse.Namespace, now: int) -> int:
    await admin.view(args.queue)
    _confirm(args, f"remove {len(args.ids)} job(s) of {args.queue!r}")
    return _results(args, await admin.remove(args.queue, args.ids))


async def _promote(admin: Admin, args: argparse.Namespace, now: int) -> int:
    await admin.view(args.queue)
    return _results(args, await admin.promote(args.queue, args.ids))


async def _revoke(admin: Admin, args: argparse.Namespace, now: int) -> int:
    await admin.view(args.queue)
    return _results(args, await admin.revoke(args.queue, args.ids))


async def _update_data(admin: Admin, args: argparse.Namespace, now: int) -> int:
    text = sys.stdin.read() if args.data == "-" else args.data
    if not text.strip():
        raise _Usage("update-data: JSON is empty; write the data to store (null, {} or a value)")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise _Usage(f"update-data: JSON is not JSON: {exc}") from None
    return _results(args, [await admin.update_data(args.queue, args.id, data)])


async def _pause_or_resume(admin: Admin, args: argparse.Namespace, now: int) -> None:
    bulk = await (admin.pause if args.command == "pause" else admin.resume)(args.queue)
    _emit(args, bulk, fmt.bulk_result(bulk))


async def _clean(admin: Admin, args: argparse.Namespace, now: int) -> None:
    await admin.view(args.queue)
    _confirm(args, f"remove {args.state} jobs of {args.queue!r} older than {args.grace} ms")
    bulk = await admin.clean(args.queue, args.state, args.grace, args.limit)
    _emit(args, bulk, fmt.bulk_result(bulk))


async def _drain(admin: Admin, args: argparse.Namespace, now: int) -> None:
    counts = await (await admin.view(args.queue)).get_job_counts()
    n = counts.waiting + counts.prioritized + (counts.delayed if args.delayed else 0)
    _confirm(args, f"remove the {n} job(s) waiting in {args.queue!r}")
    bulk = await admin.drain(args.queue, args.delayed)
    _emit(args, bulk, fmt.bulk_result(bulk))


async def _obliterate(admin: Admin, args: argparse.Namespace, now: int) -> None:
    counts = await (await admin.view(args.queue)).get_job_counts()
    total = sum(counts.as_dict().values())
    _confirm(args, f"delete queue {args.queue!r} and its {total} job(s)")
    if counts.active and not args.force:
        raise _Usage(
            f"queue {args.queue!r} has {counts.active} running job(s): stop its workers, "
            "or pass --force"
        )
    bulk = await admin.obliterate(args.queue, force=args.force)
    _emit(args, bulk, fmt.bulk_result(bulk))


async def _events(admin: Admin, args: argparse.Namespace, now: int) -> int | None:
    if args.follow:
        return await _follow(admin, args)
    events = await admin.events(args.queue, args.count)
    text = "\n".join(fmt.event_line(e) for e in events) or "no events"
    _emit(args, events, text)
    return None


async def _schedulers(admin: Admin, args: argparse.Namespace, now: int) -> None:
    found = await admin.schedulers(args.queue)
    _emit(args, found, fmt.schedulers(found, now))


async def _groups(admin: Admin, args: argparse.Namespace, now: int) -> None:
    await admin.view(args.queue)
    found = await admin.groups(args.queue)
    _emit(args, found, fmt.groups(found))


async def _pause_or_resume_group(admin: Admin, args: argparse.Namespace, now: int) -> None:
    pausing = args.command == "pause-group"
    unknown = await admin.group(args.queue, args.key) is None
    where = f"group {args.key!r} of {args.queue!r}"
    if unknown and not pausing:
        _note(f"queue {args.queue!r} has no group {args.key!r} (no jobs, no settings): "
              "nothing to resume")  # fmt: skip
        _emit(args, None, f"{where}: no such group, nothing resumed")
        return
    act = admin.pause_group if pausing else admin.resume_group
    group = await act(args.queue, args.key)
    if unknown:  # a typo, or a pause ahead of the group's first job: say which
        _note(f"queue {args.queue!r} has no group {args.key!r} yet (no jobs, no settings): "
              "it is paused ahead of its first job; check the name")  # fmt: skip
    done = "paused" if pausing else "resumed"
    _emit(args, group, f"{where} {done}")


async def _exporter(admin: Admin, args: argparse.Namespace, now: int) -> int:
    names = [validate_queue_name(q) for q in args.queue or ()]
    exporter = Exporter(admin, names or None, min_interval=args.min_interval)
    try:
        server = await exporter.serve(args.host, args.port)
    except OSError as exc:
        raise _Usage(f"--port {args.port}: cannot listen on {args.host}: {exc}") from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    what = ", ".join(names) if names else "every queue"
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"glidemq exporter: http://{host}:{args.port}/metrics for {what}; Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    async with server:
        await stop.wait()
    return OK


_COMMANDS: dict[str, _Command] = {
    "queues": _queues,
    "status": _status,
    "jobs": _jobs,
    "job": _job,
    "retry": _retry,
    "remove": _remove,
    "promote": _promote,
    "revoke": _revoke,
    "update-data": _update_data,
    "pause": _pause_or_resume,
    "resume": _pause_or_resume,
    "clean": _clean,
    "drain": _drain,
    "obliterate": _obliterate,
    "events": _events,
    "schedulers": _schedulers,
    "groups": _groups,
    "pause-group": _pause_or_resume_group,
    "resume-group": _pause_or_resume_group,
    "exporter": _exporter,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `glidemq`; returns the exit code."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    url = getattr(args, "url", None)
    try:
        conn = resolve_connection(url)
    except ValidationError as exc:
        print(f"glidemq: error: --url: {exc}", file=sys.stderr)
        return USAGE
    if url and has_password(url):
        print(
            "glidemq: warning: the password in --url can be read by every local user in the "
            "process list; pass the URL in GLIDEMQ_URL instead",
            file=sys.stderr,
            flush=True,
        )
    # a fast, clear error instead of the client's reconnect loop; the exporter starts anyway
    # and answers "down" until the server is back
    problem = None if args.command == "exporter" else unreachable(conn.url, conn.addresses)
    if problem is not None:
        print(f"glidemq: error: {problem}", file=sys.stderr)
        return UNREACHABLE
    try:
        return asyncio.run(_run(args, conn))
    except (_Usage, ValidationError, QueueNotFoundError, JobNotFoundError) as exc:
        print(f"glidemq: error: {exc}", file=sys.stderr)
        return USAGE
    except ConnectionError as exc:
        print(f"glidemq: error: {exc}", file=sys.stderr)
        return FAILED
    except GlideMQError as exc:
        print(f"glidemq: error: {exc}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        return OK
    except BrokenPipeError:
        # `glidemq jobs q | head`: the reader left; say nothing more.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK


if __name__ == "__main__":
    raise SystemExit(main())
