"""How much memory this process uses: resident set size, and virtual size for RLIMIT_AS."""

from __future__ import annotations

import contextlib
import os

__all__ = ["rss_bytes", "vm_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM = "/proc/self/statm"
# statm kept open: the RSS is read after every job when a memory limit is set, and an
# open/close per read would be two system calls more per job. After a fork the inherited
# descriptor still reads the parent's numbers, so the child forgets it.
_statm_fd: int | None = None
_statm_missing = False


def _forget_statm() -> None:
    global _statm_fd
    if _statm_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_statm_fd)
        _statm_fd = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_statm)


def _statm(field: int) -> int | None:
    """Field `field` of /proc/self/statm in bytes, or None where there is no /proc."""
    global _statm_fd, _statm_missing
    if _statm_missing:
        return None
    try:
        if _statm_fd is None:
            _statm_fd = os.open(_STATM, os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(_statm_fd, 128, 0).split()[field]) * _PAGE
    except (OSError, IndexError, ValueError):
        _forget_statm()
        _statm_missing = not os.path.exists(_STATM)
        return None


def rss_bytes() -> int:
    """This process's resident set size in bytes (Linux: /proc/self/statm; elsewhere
    psutil)."""
    rss = _statm(1)
    if rss is not None:
        return rss
    import psutil  # not imported on Linux: sandbox children start without it

    return int(psutil.Process().memory_info().rss)


def vm_bytes() -> int:
    """This process's virtual memory size in bytes (0 where there is no /proc)."""
    return _statm(0) or 0
