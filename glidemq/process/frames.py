"""Length-prefixed orjson frames: the one codec of glidemq's process pipes and sockets (a
worker process's pipe to the supervisor, the sandbox's socket to each child).

A frame is a 4-byte big-endian length and an orjson array of message objects. A sender may
put everything it has queued into one frame, so a burst costs one system call and one
wake-up of the reader.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

import orjson

from ..errors import GlideMQError

__all__ = ["HEADER_SIZE", "FrameDecoder", "FrameError", "encode_frame", "read_frame"]

_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size


class FrameError(GlideMQError, ValueError):
    """A frame is over its limit, or its body is not an array of JSON objects."""


def encode_frame(messages: Sequence[Any], limit: int) -> bytes:
    """One frame holding `messages` (values may be `orjson.Fragment`s: pre-encoded JSON);
    FrameError when the body is over `limit` bytes."""
    body = orjson.dumps(messages)
    if len(body) > limit:
        raise FrameError(f"frame of {len(body)} bytes is over the {limit} limit")
    return _HEADER.pack(len(body)) + body


class FrameDecoder:
    """Reassembles frames from a byte stream.

    Strict (the default): an oversized or undecodable frame raises FrameError, as the stream
    cannot be trusted after it and the peer is dropped. Lenient (`strict=False`): such a
    frame is skipped and its reason appended to `invalid`; after an oversized length nothing
    can be resynchronised, so the bytes buffered so far are dropped too.
    """

    __slots__ = ("_buffer", "invalid", "limit", "strict")

    def __init__(self, limit: int, *, strict: bool = True) -> None:
        self._buffer = bytearray()
        self.limit = limit
        self.strict = strict
        self.invalid: list[str] = []

    def _bad(self, reason: str) -> None:
        if self.strict:
            raise FrameError(reason)
        self.invalid.append(reason)

    def feed(self, data: bytes | memoryview) -> list[dict[str, Any]]:
        """Add bytes; return the messages of every frame now complete."""
        buf: bytes | bytearray | memoryview
        if self._buffer:
            self._buffer += data
            buf = self._buffer
        else:
            buf = data  # the usual case: whole frames, decoded without a copy
        out: list[dict[str, Any]] = []
        pos = 0
        size = len(buf)
        while size - pos >= HEADER_SIZE:
            (length,) = _HEADER.unpack_from(buf, pos)
            if length > self.limit:
                self._buffer = bytearray()
                self._bad(f"frame length {length} is over the {self.limit} limit")
                return out
            end = pos + HEADER_SIZE + length
            if end > size:
                break
            try:
                messages = orjson.loads(buf[pos + HEADER_SIZE : end])
            except orjson.JSONDecodeError as exc:
                messages = None
                reason = f"undecodable frame: {exc}"
            else:
                reason = "a frame must be an array of objects"
            pos = end
            if isinstance(messages, list) and all(type(m) is dict for m in messages):
                out += messages
            else:
                self._bad(reason)
        if buf is self._buffer:
            del self._buffer[:pos]
        elif pos < size:
            self._buffer = bytearray(buf[pos:])
        return out


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        data = sock.recv(n)
        if not data:
            raise EOFError("the peer closed the connection")
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def read_frame(sock: socket.socket, limit: int) -> list[dict[str, Any]]:
    """Read exactly one frame from a blocking socket, and no byte of the next one (which a
    non-blocking reader takes over); FrameError for a bad frame, EOFError at EOF."""
    header = _recv_exact(sock, HEADER_SIZE)
    (length,) = _HEADER.unpack(header)
    if length > limit:
        raise FrameError(f"frame length {length} is over the {limit} limit")
    return FrameDecoder(limit).feed(header + _recv_exact(sock, length))
