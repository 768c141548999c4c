"""`manage.py glidemq_run`: glidemq-run with this project's GLIDEMQ settings.

The command becomes glidemq-run (exec, same pid), so signals (SIGTERM drain, SIGHUP reload)
reach the supervisor directly. The connection URL goes to it in the environment
(`GLIDEMQ_URL`, or `GLIDEMQ_URL_FILE` for `url_file`), never on the command line, where
every local user could read it; glidemq-run then drops it (see docs/RUNTIME.md).
`DJANGO_SETTINGS_MODULE` is passed on: the processor module calls `django.setup()`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from .....errors import ValidationError
from ... import Settings, settings

# Options that would put a server address or credentials into argv, or start another server.
_REFUSED = frozenset({"url", "url_file", "url_fd", "cluster", "embedded"})


def run_environment(s: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment glidemq-run gets: `base` plus the connection and `run` options as
    GLIDEMQ_* variables."""
    env = dict(base)
    if s.url_file:
        env.pop("GLIDEMQ_URL", None)
        env["GLIDEMQ_URL_FILE"] = s.url_file
    elif s.url:
        env.pop("GLIDEMQ_URL_FILE", None)
        env["GLIDEMQ_URL"] = s.url
    if s.prefix:
        env["GLIDEMQ_PREFIX"] = s.prefix
    for key, value in s.run.items():
        name = str(key).replace("-", "_").lower()
        if name in _REFUSED:
            raise ValidationError(
                f"GLIDEMQ['run'][{key!r}]", "set the server with GLIDEMQ['url'] or 'url_file'"
            )
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        env[f"GLIDEMQ_{name.upper()}"] = str(value)
    settings_module = os.environ.get("DJANGO_SETTINGS_MODULE") or getattr(
        django_settings, "SETTINGS_MODULE", None
    )
    if settings_module:
        env["DJANGO_SETTINGS_MODULE"] = settings_module
    return env


class Command(BaseCommand):
    help = "Run glidemq-run (worker processes) with this project's GLIDEMQ settings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "target", nargs="?", help="the processor MODULE:ATTR (default: GLIDEMQ['processor'])"
        )
        parser.add_argument(
            "--queue", dest="queues", action="append", help="queue (repeatable; default: settings)"
        )
        parser.add_argument("--procs", type=int, help="worker processes")
        parser.add_argument("--concurrency", type=int, help="jobs at once per process")
        parser.add_argument(
            "--dry-run", action="store_true", help="print the command (no URL) and exit"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            s = settings()
            env = run_environment(s, os.environ)
        except ValidationError as exc:
            raise CommandError(str(exc)) from None
        target = options["target"] or s.processor
        if not target:
            raise CommandError("no processor: give MODULE:ATTR or set GLIDEMQ['processor']")
        argv = [sys.executable, "-m", "glidemq.runtime.cli", target]
        for queue in options["queues"] or s.queues:
            argv += ["--queue", queue]
        for flag in ("procs", "concurrency"):
            if options[flag] is not None:
                argv += [f"--{flag}", str(options[flag])]
        if options["dry_run"]:
            self.stdout.write(" ".join(argv))
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, env)
