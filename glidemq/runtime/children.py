"""What the supervisor knows about each process it forked: its pipe, its last report
(counters, the jobs it ran), its state in the fleet."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..process.frames import FrameDecoder
from ..process.ledger import RunLedger
from . import ipc
from .reclaim import Holding

__all__ = ["ForkedProcess"]

_NAMED = 5  # jobs named in the line telling a death; the rest are counted


@dataclass
class ForkedProcess:
    """What the supervisor knows about one process it forked (a worker, or the reclaimer)."""

    slot: int
    pid: int
    fd: int
    generation: int
    started: float
    reader: FrameDecoder = field(default_factory=ipc.new_reader)
    last_seen: float = 0.0
    ready: bool = False
    stopping: bool = False
    kill_at: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    boot_error: dict[str, Any] | None = None
    exit_reason: str | None = None
    holdings: list[Holding] = field(default_factory=list)
    reclaimer: bool = False  # the short-lived process handing back dead children's jobs
    running: list[list[str]] = field(default_factory=list)
    """[queue, job id, job name] of the jobs it ran at its last heartbeat (at most 20)."""
    reported: float = 0.0  # monotonic time of that heartbeat
    ledger: RunLedger | None = None
    """The runs it has under way, readable after its death (worker processes only)."""

    def what_it_ran(self) -> str:
        """What the process ran as of its last heartbeat, for the line telling its death."""
        if not self.running:
            return "it was running no job at its last report"
        ago = time.monotonic() - self.reported
        jobs = ", ".join(f"{q}:{i} ({n})" for q, i, n in self.running[:_NAMED])
        more = len(self.running) - _NAMED
        shown = jobs + (f" and {more} more" if more > 0 else "")
        return (
            f"it was running {len(self.running)} job(s) at its last report {ago:.1f} s "
            f"earlier: {shown}; they run again once handed back or their lock runs out"
        )
