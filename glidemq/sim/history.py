"""The history of one simulated run: every fact the checker reads, in the order it happened.

Records come from four places: the producer (acknowledged adds, edits, removals, limit
changes), the workers' processors (each run's start, what it saw, how it ended), the workers'
own events (the outcome a worker recorded), and the server (the events its library wrote,
and the entries stall recovery claimed from a consumer); the fault injector adds the faults.
Times are virtual seconds since the run began.

`digest()` hashes the readable form, so two runs of the same code and seed give the same
digest, in any process, and a change of schedule anywhere shows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["History", "Record"]


@dataclass(frozen=True, slots=True)
class Record:
    """One fact: when (virtual s), what kind, who (a process or "server"), which job."""

    t: float
    kind: str
    who: str
    job: str
    info: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The record as one readable line."""
        extra = " ".join(f"{k}={_text(v)}" for k, v in self.info.items())
        job = f" {self.job}" if self.job else ""
        return f"{self.t:10.4f} {self.who:>8} {self.kind:<14}{job}{' ' + extra if extra else ''}"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


class History:
    """The records of one run, in order."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.records: list[Record] = []
        self.recording = True

    def add(self, t: float, what: str, who: str, job: str = "", **info: Any) -> Record:
        record = Record(round(t - self.start, 6), what, who, job, info)
        if self.recording:
            self.records.append(record)
        return record

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def of(self, *kinds: str) -> list[Record]:
        """The records of these kinds, in order."""
        wanted = set(kinds)
        return [r for r in self.records if r.kind in wanted]

    def lines(self) -> list[str]:
        return [r.line() for r in self.records]

    def digest(self) -> str:
        """A hash of the whole history (the same for the same code and seed)."""
        h = hashlib.sha256()
        for line in self.lines():
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()[:16]
