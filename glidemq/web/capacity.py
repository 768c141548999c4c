"""How many event streams a web face keeps open, and what it does near the end of the
process's file descriptors.

A stream holds a socket (and, the first on a queue, a server connection) for as long as the
client stays. `StreamGate` admits at most `max_streams` of them and none that would leave
fewer than `reserve` descriptors free, so `/health`, pages and adds keep what they need; a
refusal is `StreamsFull`, answered 503 with `Retry-After`. Running out of descriptors
anyway (a server connection that cannot be made) is one warning line a minute
(`OutOfDescriptors`), never a traceback per request. Standard library only."""

from __future__ import annotations

import errno
import logging
import os
import re
import resource
import time
from collections.abc import Callable

from ..errors import ConnectionError, GlideMQError

__all__ = [
    "DEFAULT_MAX_STREAMS",
    "RETRY_AFTER_S",
    "StreamGate",
    "StreamsFull",
    "free_descriptors",
    "out_of_descriptors",
    "warn_out_of_descriptors",
]

DEFAULT_MAX_STREAMS = 256
"""Event streams a web face keeps open at once unless told otherwise."""
RETRY_AFTER_S = 5
"""What a refused stream's `Retry-After` says, in seconds."""
_WARN_EVERY_S = 60.0
_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how valkey-glide's Rust core reports errno
_EXHAUSTED = (errno.EMFILE, errno.ENFILE)
_warned_at: dict[str, float] = {}  # per logger: one line a minute for the whole process


class StreamsFull(GlideMQError):
    """An event stream refused: `max_streams` are open, or too few file descriptors are
    left. Answered with 503 and `Retry-After: retry_after`."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def free_descriptors() -> int | None:
    """File descriptors this process may still open (None where it cannot tell)."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - used


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is the process running out of file descriptors:
    an OSError with EMFILE or ENFILE, or a connection error valkey-glide reported with
    that errno."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _EXHAUSTED:
            return True
        if isinstance(current, ConnectionError):
            found = _OS_ERROR.search(str(current))
            if found is not None and int(found.group(1)) in _EXHAUSTED:
                return True
        current = current.__cause__ or current.__context__
    return False


def warn_out_of_descriptors(log: str, detail: str, streams: int | None = None) -> None:
    """One warning line on logger `log`, at most once a minute, that requests get 503 for
    want of file descriptors."""
    now = time.monotonic()
    if now - _warned_at.get(log, float("-inf")) < _WARN_EVERY_S:
        return
    _warned_at[log] = now
    held = f", {streams} event streams open" if streams is not None else ""
    logging.getLogger(log).warning(
        "glidemq: out of file descriptors (%s%s): answering 503 until some are free; "
        "raise the limit (ulimit -n) or lower --max-streams",
        detail,
        held,
    )


class StreamGate:
    """Admits event streams: at most `max_streams` open at once, and only while at least
    `reserve` file descriptors stay free (default: a sixteenth of the limit, at least 32).
    `admit()` returns the release for one admitted stream."""

    def __init__(
        self, max_streams: int = DEFAULT_MAX_STREAMS, *, reserve: int | None = None, log: str
    ) -> None:
        from ..errors import ValidationError

        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise ValidationError("max_streams", "must be a whole number >= 1")
        self.max_streams = max_streams
        if reserve is None:
            try:
                soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            except (OSError, ValueError):
                soft = resource.RLIM_INFINITY
            reserve = 32 if soft == resource.RLIM_INFINITY else max(32, soft // 16)
        self.reserve = reserve
        self.open = 0
        self.refused = 0
        """Streams refused since the gate was made."""
        self._log = log

    def admit(self) -> Callable[[], None]:
        """Count one more open stream, or raise StreamsFull."""
        if self.open >= self.max_streams:
            self.refused += 1
            raise StreamsFull(f"all {self.max_streams} event streams are open; try again later")
        free = free_descriptors()
        if free is not None and free < self.reserve:
            self.refused += 1
            self.warn_out_of_descriptors(f"only {free} file descriptors left")
            raise StreamsFull("too few file descriptors left for another event stream")
        self.open += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open -= 1

        return release

    def warn_out_of_descriptors(self, detail: str) -> None:
        """`warn_out_of_descriptors` on this gate's logger."""
        warn_out_of_descriptors(self._log, detail, self.open)
