"""How glidemq-run keeps the Valkey password out of what other local users can read.

`/proc/PID/cmdline` and `/proc/PID/environ` are readable by every local user, and a forked
worker shows its supervisor's: the command line, and the environment the supervisor was
exec'd with (changing os.environ later changes nothing there). So when a password is in
`--url` or in `GLIDEMQ_URL`, glidemq-run execs itself again, keeping its pid, without it:
the URL travels on a pipe (`--url-fd`), the environment loses `GLIDEMQ_URL`. Workers are
forked and get the connection in memory; sandbox processes are exec'd with an environment
without credentials (`glidemq.sandbox.launcher.child_environ`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..client.connection import has_password
from .config import RuntimeConfig, UsageError

__all__ = ["PASSWORD_IN_ARGV", "hide_secrets", "read_url", "url_flag"]

PASSWORD_IN_ARGV = (
    "glidemq-run: warning: the password in --url can be read by every local user in the "
    "process list; pass the URL in GLIDEMQ_URL or --url-file instead"
)


def url_flag(args: Sequence[str]) -> str | None:
    """The value of `--url` on a command line, if there is one."""
    value = None
    for i, arg in enumerate(args):
        if arg == "--url" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--url="):
            value = arg.removeprefix("--url=")
    return value


def _without_url_flag(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--url":
            skip = True
        elif not arg.startswith("--url="):
            out.append(arg)
    return out


def hide_secrets(cfg: RuntimeConfig, args: Sequence[str]) -> None:
    """Exec this program again without the password in its command line or environment,
    the URL in use on a pipe. Returns only when there is no password to hide (or when this
    process was started in a way it cannot repeat; the exec itself does not return)."""
    if not (has_password(url_flag(args) or "") or has_password(os.environ.get("GLIDEMQ_URL", ""))):
        return
    keep = len(sys.orig_argv) - len(args)  # the interpreter and the script or `-m module`
    if keep < 1 or list(sys.orig_argv[keep:]) != list(args):
        return
    new_args = _without_url_flag(args)
    if cfg.url is not None:
        read_end, write_end = os.pipe()
        os.write(write_end, cfg.url.encode())  # a URL is far below a pipe's buffer
        os.close(write_end)
        os.set_inheritable(read_end, True)
        new_args += ["--url-fd", str(read_end)]
    env = {k: v for k, v in os.environ.items() if k != "GLIDEMQ_URL"}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [*sys.orig_argv[:keep], *new_args], env)
    except OSError as exc:
        print(f"glidemq-run: warning: cannot hide the password ({exc})", file=sys.stderr)


def read_url(cfg: RuntimeConfig) -> str | None:
    """The server URL from `--url-fd`, `--url-file` or `--url`/GLIDEMQ_URL (None: none)."""
    if cfg.url_fd is not None:
        chunks = []
        try:
            while data := os.read(cfg.url_fd, 65536):
                chunks.append(data)
            os.close(cfg.url_fd)
        except OSError as exc:
            raise UsageError(f"--url-fd {cfg.url_fd}: {exc.strerror or exc}") from None
        return b"".join(chunks).decode().strip()
    if cfg.url_file:
        try:
            with open(cfg.url_file, encoding="utf-8") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise UsageError(f"--url-file: cannot read {cfg.url_file}: {why}") from None
        if not text:
            raise UsageError(f"--url-file: {cfg.url_file} is empty")
        return text
    return cfg.url
