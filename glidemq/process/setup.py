"""Setting up a child process glidemq started: a worker process forked by the supervisor, the
sandbox's fork server (exec'd), and a sandbox child (forked by the fork server, or exec'd).

`run_as_child` is the one place that knows what such a process must do first (signal
dispositions and mask, descriptors of the parent it must not keep, its process group, dying
with its parent, its name) and how it ends: `os._exit` with the body's code, after printing
what escaped the body, so no parent's `atexit` or `finally` runs twice.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import NoReturn, Protocol

__all__ = ["HAS_PDEATHSIG", "die_with_parent", "run_as_child", "set_process_name"]

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_prctl: Callable[..., int] | None = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError, AttributeError):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl

HAS_PDEATHSIG = _prctl is not None
"""Whether `die_with_parent` is kept by the kernel (Linux); elsewhere it only checks."""

# Signals a glidemq parent may handle (the supervisor handles them all); a child starts with
# the default action for each, and ignores SIGINT: Ctrl-C reaches the terminal's whole
# process group, and the parent decides what happens.
_RESET = (
    signal.SIGTERM,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGCHLD,
    signal.SIGTTIN,
    signal.SIGTTOU,
)


class _Closable(Protocol):
    def close(self) -> None: ...


def die_with_parent(parent_pid: int) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; False if it already has
    (the parent died before the request took effect)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    return os.getppid() == parent_pid


def set_process_name(name: bytes) -> None:
    """Name the process for ps/top (the kernel's `comm`, 15 bytes at most)."""
    if _prctl is not None:
        _prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def _reset_signals(mask: Iterable[int]) -> None:
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in _RESET:
        signal.signal(sig, signal.SIG_DFL)
    # dispositions first, then unblock: a signal the parent blocked around fork() and that
    # is pending now gets the child's action, never the parent's handler
    signal.pthread_sigmask(signal.SIG_SETMASK, set(mask))


def run_as_child(
    body: Callable[[], int],
    *,
    error_code: int,
    close: Iterable[int | _Closable] = (),
    mask: Iterable[int] = (),
    new_group: bool = False,
    parent_pid: int | None = None,
    name: bytes | None = None,
) -> NoReturn:
    """Set this new process up as a child and exit with `body()`'s code; never returns.

    `close`: the parent's descriptors or objects it must not keep; `mask`: the signal mask to
    run with (empty by default); `new_group`: lead a process group of its own, so a kill of
    the group takes its subprocesses too; `parent_pid`: die with that parent (exit 0 at once
    when it is already gone); `name`: the process name. Anything escaping `body` is printed
    and the process exits with `error_code`.
    """
    code = error_code
    try:
        _reset_signals(mask)
        for item in close:
            with contextlib.suppress(OSError):
                if isinstance(item, int):
                    os.close(item)
                else:
                    item.close()
        if new_group:
            os.setpgid(0, 0)
        if parent_pid is not None and not die_with_parent(parent_pid):
            code = 0
        else:
            if name is not None:
                set_process_name(name)
            code = body()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
