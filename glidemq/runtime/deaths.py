"""How a worker process died, in words for the jobs it was running.

The supervisor reaps its children and knows their exit status; the jobs a dead child was
running are handed back by another process (glidemq.runtime.reclaim), which stores this text
in each job's attempt record and failure reason. A SIGKILL sent by the kernel's OOM killer
looks like any other SIGKILL in the exit status; the OOM kill counter of the supervisor's
memory cgroup (v2 `memory.events`, v1 `memory.oom_control`: `oom_kill N`) tells them apart
when it grew since the last death.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["DeathCauses", "oom_counter_file"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def oom_counter_file(proc_cgroup: str = "/proc/self/cgroup") -> Path | None:
    """The file holding this process's memory cgroup OOM kill count, or None."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            candidate = _CGROUP_ROOT / rel / "memory.events"
        elif "memory" in controllers.split(","):
            candidate = _CGROUP_ROOT / "memory" / rel / "memory.oom_control"
        else:
            continue
        if candidate.is_file():
            return candidate
    return None


def _oom_kills(path: Path | None) -> int | None:
    if path is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    return None


class DeathCauses:
    """Describes the deaths of one supervisor's children."""

    def __init__(self, counter: Path | None = None, *, find: bool = True) -> None:
        self.counter = counter if counter is not None or not find else oom_counter_file()
        self._oom = _oom_kills(self.counter)

    def cause(self, status: int) -> str:
        """What killed a child that exited with wait status `status` ("" for a clean exit)."""
        code = os.waitstatus_to_exitcode(status)
        oom = _oom_kills(self.counter)
        grew = oom is not None and self._oom is not None and oom > self._oom
        if oom is not None:
            self._oom = oom
        if code == 0:
            return ""
        if code > 0:
            return f"worker process exited with code {code} while running"
        name = signal.Signals(-code).name
        if grew and -code == signal.SIGKILL:
            return f"worker process killed by {name} (the kernel's OOM killer) while running"
        return f"worker process killed by {name} while running"
