"""Which runs a worker process has under way, in memory its supervisor can read after the
process died.

When a process dies in the moment between the server recording a job's start and the run
beginning, the server cannot tell that job from one that killed its process as it started
(docs/RUNTIME.md, "Held jobs"). The process itself knew; this ledger keeps what it knew
past its death. The supervisor maps one anonymous shared page set per child before forking
it; the child marks each run as it begins and clears the mark as it ends, with no system
call (a store into shared memory). After reaping the child, the supervisor reads the marks
left and hands them to whoever reclaims the child's jobs: a start recorded for a run that
never began goes back uncharged and unsuspected.

Slot layout (SLOT bytes each, after a one-byte header whose value 1 means some run found no
free slot, so the marks are incomplete): a state byte (1: in use), a two-byte big-endian
length, then `consumer NUL entry id`. The state byte is written last on begin and first on
end, so a process killed halfway through either leaves the slot as it was before.
"""

from __future__ import annotations

import mmap
from typing import Protocol

__all__ = ["Marks", "RunLedger", "current", "install"]

SLOT = 128
_HEADER = 1
_PAYLOAD = SLOT - 3
DEFAULT_SLOTS = 4096


class Marks(Protocol):
    """Where a worker marks its runs: a RunLedger, or nowhere outside a supervised process."""

    def begin(self, consumer: str, entry_id: str) -> int:
        """Mark a run as begun; the mark for `end`."""

    def end(self, mark: int) -> None:
        """The run of `mark` has ended."""


class _Nowhere:
    """No supervisor reads the marks: they are not kept."""

    def begin(self, consumer: str, entry_id: str) -> int:
        return -1

    def end(self, mark: int) -> None:
        return None


class RunLedger:
    """The runs under way in one worker process (written by it, read by its supervisor)."""

    def __init__(self, slots: int = DEFAULT_SLOTS) -> None:
        self.slots = slots
        self._mem = mmap.mmap(-1, _HEADER + slots * SLOT)  # anonymous, shared across fork
        self._free = list(range(slots - 1, -1, -1))

    # -- in the worker process ----------------------------------------------------------------

    def begin(self, consumer: str, entry_id: str) -> int:
        """Mark a run of `consumer`'s stream entry as begun; returns the mark for `end` (-1:
        no room, and the ledger now says it is incomplete)."""
        payload = f"{consumer}\0{entry_id}".encode()
        if not self._free or len(payload) > _PAYLOAD:
            self._mem[0] = 1
            return -1
        slot = self._free.pop()
        at = _HEADER + slot * SLOT
        self._mem[at + 1 : at + 3] = len(payload).to_bytes(2, "big")
        self._mem[at + 3 : at + 3 + len(payload)] = payload
        self._mem[at] = 1
        return slot

    def end(self, mark: int) -> None:
        """The run `begin` returned `mark` for has ended."""
        if mark < 0:
            return
        self._mem[_HEADER + mark * SLOT] = 0
        self._free.append(mark)

    # -- in the supervisor ----------------------------------------------------------------------

    def began(self) -> dict[str, list[str]] | None:
        """Per consumer, the stream entries whose run had begun and not ended; None when the
        marks are incomplete (then nobody can say which runs began)."""
        if self._mem.closed or self._mem[0]:
            return None
        out: dict[str, list[str]] = {}
        for slot in range(self.slots):
            at = _HEADER + slot * SLOT
            if self._mem[at] != 1:
                continue
            size = int.from_bytes(self._mem[at + 1 : at + 3], "big")
            if size > _PAYLOAD:
                return None
            text = self._mem[at + 3 : at + 3 + size].decode(errors="replace")
            consumer, sep, entry = text.partition("\0")
            if not sep:
                return None
            out.setdefault(consumer, []).append(entry)
        return out

    def close(self) -> None:
        """Unmap it (the supervisor, once the child's jobs are accounted for)."""
        self._mem.close()


_NOWHERE = _Nowhere()
_current: Marks = _NOWHERE


def install(ledger: RunLedger | None) -> None:
    """Make `ledger` the one this process's workers mark their runs in (a forked worker
    process, at its start)."""
    global _current
    _current = _NOWHERE if ledger is None else ledger


def current() -> Marks:
    """Where this process marks its runs: its ledger, or nowhere outside a supervised
    process."""
    return _current
