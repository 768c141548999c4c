"""The sandbox IPC transport: the Channel that reads and writes frames
(`glidemq.process.frames`) on a Unix stream socket on an event loop (the messages themselves
are in `protocol.py`).

Everything one side queues in one event-loop iteration goes out in one frame and one
`send()`, so a burst of jobs or results costs one system call and one wake-up of the other
side, not one per message.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from typing import Any

from ..process.frames import FrameDecoder, FrameError, encode_frame
from .protocol import Message

__all__ = ["MAX_FRAME", "Channel"]

MAX_FRAME = 256 << 20  # a batch of large jobs can be big; anything past this is a broken peer
_READ_SIZE = 1 << 18


# -- the channel --------------------------------------------------------------------------


class Channel:
    """A non-blocking socket on an event loop: coalesced writes, frame-decoded reads.

    `send()` queues a message; the queue is written as one frame at the end of the current
    loop iteration. `on_messages(list)` gets what arrives; `on_close(reason)` is called once,
    when the peer closes, the socket fails, or `close()` is called.
    """

    __slots__ = (
        "_closed",
        "_decoder",
        "_drain",
        "_fd",
        "_loop",
        "_on_close",
        "_on_messages",
        "_out",
        "_paused",
        "_pending",
        "_rbuf",
        "_scheduled",
        "_sock",
    )

    def __init__(
        self,
        sock: socket.socket,
        on_messages: Callable[[list[dict[str, Any]]], None],
        on_close: Callable[[str], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop or asyncio.get_running_loop()
        self._on_messages = on_messages
        self._on_close = on_close
        self._decoder = FrameDecoder(MAX_FRAME)
        # recv_into one buffer: recv(n) would allocate n bytes per call (an mmap when large)
        self._rbuf = memoryview(bytearray(_READ_SIZE))
        self._pending: list[Message] = []
        self._out = bytearray()
        self._scheduled = False
        self._closed = False
        self._paused = False
        self._drain: list[Callable[[], None]] = []
        self._loop.add_reader(self._fd, self._readable)

    @property
    def closed(self) -> bool:
        """Whether the channel is closed (by either side)."""
        return self._closed

    @property
    def unwritten(self) -> bool:
        """Whether bytes of a flushed frame still wait for room in the socket."""
        return bool(self._out)

    def when_written(self, callback: Callable[[], None]) -> None:
        """Call `callback` once every flushed frame is in the socket (now if it is, never
        if the channel closes first)."""
        if not self._out:
            callback()
        elif not self._closed:
            self._drain.append(callback)

    def send(self, message: Message) -> None:
        """Queue `message`; it goes out with the others of this loop iteration."""
        if self._closed:
            return
        self._pending.append(message)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write the queued messages now (as much as the socket takes without blocking)."""
        self._scheduled = False
        if self._closed:
            return
        if self._pending:
            batch, self._pending = self._pending, []
            try:
                frame = encode_frame(batch, MAX_FRAME)
            except (TypeError, FrameError) as exc:
                # Values are checked when messages are built; this is a bug or a huge frame.
                self.close(f"cannot encode a frame: {exc}")
                return
            if self._out:
                self._out += frame
                return  # the writer callback is already armed
            self._out = bytearray(frame)
        self._write()

    def _write(self) -> None:
        while self._out:
            try:
                n = self._sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    # The peer closed its end (it is exiting): what it wrote before still
                    # counts, so read that first; the read then ends at EOF.
                    self._out.clear()
                    self.drain_input()
                    self.close("peer closed the connection")
                else:
                    self.close(f"write failed: {exc.strerror or exc}")
                return
            del self._out[:n]
        if self._out:
            self._loop.add_writer(self._fd, self._write)
            return
        self._loop.remove_writer(self._fd)
        if self._drain:
            callbacks, self._drain = self._drain, []
            for callback in callbacks:
                callback()

    def pause_reading(self) -> None:
        """Stop reading (backpressure); `resume_reading()` starts again."""
        if not self._paused and not self._closed:
            self._paused = True
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        """Read again after `pause_reading()`."""
        if self._paused and not self._closed:
            self._paused = False
            self._loop.add_reader(self._fd, self._readable)

    def drain_input(self) -> None:
        """Read and deliver whatever the peer already wrote (used once it is known dead)."""
        while not self._closed:
            if not self._read_once():
                return

    def _readable(self) -> None:
        self._read_once()

    def _read_once(self) -> bool:
        try:
            n = self._sock.recv_into(self._rbuf)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            if exc.errno != errno.ECONNRESET:
                self.close(f"read failed: {exc.strerror or exc}")
                return False
            n = 0
        if not n:
            self.close("peer closed the connection")
            return False
        try:
            messages = self._decoder.feed(self._rbuf[:n])
        except FrameError as exc:
            self.close(str(exc))
            return False
        if messages:
            self._on_messages(messages)
        return True

    def write_blocking(self, timeout: float = 2.0) -> None:
        """Flush queued messages, blocking up to `timeout` (for a child about to exit)."""
        if self._closed:
            return
        if self._pending:
            batch, self._pending = self._pending, []
            self._out += encode_frame(batch, MAX_FRAME)
        if not self._out:
            return
        self._loop.remove_writer(self._fd)
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(self._out)
            self._out.clear()
        except OSError:
            pass
        finally:
            self._sock.setblocking(False)

    def close(self, reason: str = "closed") -> None:
        """Stop the channel and close the socket; calls on_close(reason) once."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._out.clear()
        self._drain.clear()
        if not self._paused:
            self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._sock.close()
        self._on_close(reason)
