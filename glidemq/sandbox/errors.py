"""Errors of the sandbox pool. All are GlideMQErrors; a job failed by one of them is retried
per its attempts like any other failure."""

from __future__ import annotations

import signal

from ..errors import GlideMQError

__all__ = [
    "RemoteError",
    "RemoteTraceback",
    "SandboxBootError",
    "SandboxClosedError",
    "SandboxCrashError",
    "SandboxError",
    "SandboxHandBack",
    "SandboxUnavailable",
    "describe_exit",
]


class SandboxError(GlideMQError):
    """Root of the sandbox pool's own errors."""


class SandboxCrashError(SandboxError):
    """The child process running the job died (exit, signal) or was killed by the pool.

    `exitcode` is the process's exit code, or minus the signal number that ended it.
    """

    def __init__(self, message: str, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.exitcode = exitcode

    @property
    def signal(self) -> int | None:
        """The signal that ended the child, if a signal did."""
        return -self.exitcode if self.exitcode is not None and self.exitcode < 0 else None


class SandboxBootError(SandboxError):
    """A child could not load the processor (import error, missing attribute, crash at
    import). The pool keeps retrying with backoff; meanwhile a Worker takes no jobs (those it
    held go back to the queue) and a run on the pool alone fails with it."""


class SandboxClosedError(SandboxError):
    """The pool was closed while the job waited for a child."""


class SandboxHandBack(SandboxError):
    """A run that never started (its child died or gave it back) found no child to take it
    now: the Worker puts the job back in its queue, without using an attempt, so another
    worker may run it instead of it waiting here behind long jobs."""


class SandboxUnavailable(SandboxHandBack):
    """No sandbox child can load the processor: the Worker puts the job back in its queue,
    without using an attempt, and takes no more jobs until a child starts."""


class RemoteError(SandboxError):
    """An exception of a type the parent does not know, raised by a processor in a child.

    `type_name` is the child's qualified class name; `str()` is the original message, so the
    job's failure reason reads as it would in-process.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name


class RemoteTraceback(Exception):
    """Carries a child's formatted traceback as the `__cause__` of the rebuilt exception, so
    `traceback.format_exception` (and with it the job's stored stacktrace) shows the child's
    frames first."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


def describe_exit(exitcode: int | None) -> str:
    """'exited with code 3' or 'was killed by signal SIGKILL (9)'."""
    if exitcode is None:
        return "exited (status unknown)"
    if exitcode >= 0:
        return f"exited with code {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    return f"was killed by signal {name} ({-exitcode})"
