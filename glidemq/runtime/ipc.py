"""Messages from a worker process to its supervisor: length-prefixed orjson frames.

A frame is a 4-byte big-endian length and an orjson object with a `type` field. The
channel is one-way (child to supervisor); the supervisor talks to children with signals.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import orjson

__all__ = ["MAX_FRAME", "FrameReader", "encode", "write_frame"]

MAX_FRAME = 1 << 20
_HEADER = struct.Struct(">I")

# Message types. BOOT_ERROR carries a traceback; HEARTBEAT carries counters; EXITING a reason;
# HOLDINGS the consumers a process reads with (sent before it takes a job); RECLAIMED the
# holdings of dead processes whose jobs it handed back (glidemq.runtime.reclaim).
READY = "ready"
BOOT_ERROR = "boot_error"
HEARTBEAT = "heartbeat"
EXITING = "exiting"
HOLDINGS = "holdings"
RECLAIMED = "reclaimed"


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding `message`."""
    body = orjson.dumps(message)
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame of {len(body)} bytes is over the {MAX_FRAME} limit")
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write a frame to a pipe; frames are small, so one write is atomic (< PIPE_BUF) or
    completes fully on a blocking descriptor."""
    data = encode(message)
    while data:
        n = os.write(fd, data)
        data = data[n:]


class FrameReader:
    """Reassembles frames from the bytes read off a non-blocking pipe."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add bytes; return the complete messages now available (a bad frame is skipped
        as {"type": "invalid"} so one broken child cannot wedge the supervisor)."""
        self._buffer += data
        out: list[dict[str, Any]] = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME:
                self._buffer.clear()
                out.append({"type": "invalid", "error": f"frame length {length}"})
                break
            if len(self._buffer) < _HEADER.size + length:
                break
            body = bytes(self._buffer[_HEADER.size : _HEADER.size + length])
            del self._buffer[: _HEADER.size + length]
            try:
                message = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                out.append({"type": "invalid", "error": str(exc)})
                continue
            out.append(message if isinstance(message, dict) else {"type": "invalid"})
        return out
