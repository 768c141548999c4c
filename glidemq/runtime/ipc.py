"""Messages from a worker process to its supervisor, in frames of `glidemq.process.frames`.

Every message is an object with a `type` field; each is written as a frame of its own. The
channel is one-way (child to supervisor); the supervisor talks to children with signals.
"""

from __future__ import annotations

import os
from typing import Any

from ..process.frames import FrameDecoder, encode_frame

__all__ = ["MAX_FRAME", "new_reader", "write_frame"]

MAX_FRAME = 1 << 20

# Message types. BOOT_ERROR carries a traceback; HEARTBEAT carries counters; EXITING a reason;
# HOLDINGS the consumers a process reads with (sent before it takes a job); RECLAIMED the
# holdings of dead processes whose jobs it handed back (glidemq.runtime.reclaim).
READY = "ready"
BOOT_ERROR = "boot_error"
HEARTBEAT = "heartbeat"
EXITING = "exiting"
HOLDINGS = "holdings"
RECLAIMED = "reclaimed"


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write a frame to a pipe; frames are small, so one write is atomic (< PIPE_BUF) or
    completes fully on a blocking descriptor."""
    data = encode_frame([message], MAX_FRAME)
    while data:
        n = os.write(fd, data)
        data = data[n:]


def new_reader() -> FrameDecoder:
    """A lenient decoder for one child's pipe: a bad frame is skipped (and listed in its
    `invalid`), so one broken child cannot wedge the supervisor."""
    return FrameDecoder(MAX_FRAME, strict=False)
