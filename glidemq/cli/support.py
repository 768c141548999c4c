"""What glidemq's command-line tools share: one-line argparse errors with a "did you mean"
for mistyped commands and flags, and the reachability check of the server before starting,
with one exit code for "the server cannot be reached" in every tool."""

from __future__ import annotations

import argparse
import difflib
import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

from ..errors import ConnectionError

__all__ = ["EXIT_UNREACHABLE", "EXIT_USAGE", "Parser", "unreachable"]

EXIT_USAGE = 2
"""Bad input: a flag, a value, a command (argparse's own code)."""
EXIT_UNREACHABLE = 6
"""No address of the server accepted a connection (or its host name does not exist)."""

_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_UNKNOWN = re.compile(r"unrecognized arguments: (.*)")


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of `parser` and of its subcommands."""
    found: list[str] = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk
        found.extend(s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                found.extend(_option_strings(sub))
    return sorted(set(found))


def _closest(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """' (did you mean X?)' for an argparse error about a mistyped choice or flag, else ''."""
    choice = _CHOICE.search(message)
    if choice:
        options = re.findall(r"'([^']*)'", choice.group(2))
        best = _closest(choice.group(1), options)
        return f" (did you mean {best!r}?)" if best else ""
    unknown = _UNKNOWN.search(message)
    if unknown:
        flags = _option_strings(parser)
        hints: list[tuple[str, str]] = []
        for word in unknown.group(1).split():
            flag = word.split("=", 1)[0]
            best = _closest(flag, flags) if flag.startswith("--") else None
            if best:
                hints.append((flag, best))
        if len(hints) == 1:
            return f" (did you mean {hints[0][1]}?)"
        if hints:
            return " (did you mean " + ", ".join(f"{b} for {f}" for f, b in hints) + "?)"
        return ""
    return ""


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, with a suggestion for a mistyped command
    or flag, and exit 2 (no usage dump: `-h` has it)."""

    def error(self, message: str) -> NoReturn:
        hint = suggestion(self, message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{hint} (see {self.prog} -h)\n")


def _name_unknown(exc: OSError) -> bool:
    """A host name that does not exist (not a resolver that is briefly unavailable)."""
    return isinstance(exc, socket.gaierror) and exc.errno in (
        socket.EAI_NONAME,
        getattr(socket, "EAI_NODATA", socket.EAI_NONAME),
    )


def unreachable(
    url: str,
    addresses: Sequence[tuple[str, int]],
    *,
    wait: float = 0.0,
    attempt_timeout: float = 3.0,
    on_retry: Callable[[str, float], None] | None = None,
) -> str | None:
    """None once some address accepts a TCP connection; else why not, after retrying with
    backoff for up to `wait` seconds. A host name that does not exist fails at once."""
    deadline = time.monotonic() + wait
    delay = 0.1
    while True:
        last = ""
        for host, port in addresses:
            try:
                with socket.create_connection((host, port), timeout=attempt_timeout):
                    return None
            except OSError as exc:
                if _name_unknown(exc):
                    return f"cannot reach Valkey at {url}: no such host {host!r}"
                last = f"{host}:{port}: {exc.strerror or exc}"
        if time.monotonic() + delay > deadline:
            within = f" within {wait:g} s" if wait > 0 else ""
            refused = "refused" in last.lower()
            hint = f"; {ConnectionError.REFUSED_HINT}" if refused else ""
            return f"cannot reach Valkey at {url} ({last}){within}{hint}"
        if on_retry is not None:
            on_retry(last, delay)
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
