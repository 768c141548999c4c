"""CPU time of processes, read from /proc, for CPU-per-job figures."""

from __future__ import annotations

import os
import resource

__all__ = ["process_cpu_seconds", "self_cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process `pid` (Linux /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    # fields[11], fields[12]: utime, stime after the command name
    return (int(fields[11]) + int(fields[12])) / _TICKS


def self_cpu_seconds() -> float:
    """User + system CPU seconds used so far by this process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
