"""The sandbox IPC protocol, both ends: frames, messages, the channel, and errors on the wire.

Transport: one Unix stream socket per child. A frame is a 4-byte big-endian length and an
orjson array of messages: everything one side queues in one event-loop iteration goes out
in one frame and one `send()`, so a burst of jobs or results costs one system call and one
wake-up of the other side, not one per message.

A message is a JSON object with `t` (its type) and, for the ones about work, `i` (the
invocation id, chosen by the parent per run; or the call id, chosen by the child per proxied
call). The parent opens with `hello`; the child answers `ready` or `boot_error`.

    parent -> child   hello  {v, target, batch, hb, rss_limit, hard_limit, sys_path}
                      run    {i, jobs: [job...], batch}       run a job (or a batch)
                      abort  {i}                              cancel that run
                      reply  {i, ok: value} | {i, err: error} answer to a proxied call
                      stop   {}                               finish and exit
    child -> parent   ready  {v, pid, async}
                      boot_error {v, err: error}
                      result {i, v, rss?}                     the run returned v
                      error  {i, err: error, rss?, retire?}   the run raised
                      call   {i, h, m, a}                     Job method m(*a) on job handle h
                                                              (i = 0: no reply wanted)
                      hb     {rss, active}                    heartbeat

Errors cross as {type, name, message, args, attrs, traceback, results?}. The receiving side
rebuilds only types in its registry (`register_error`); anything else becomes a
`RemoteError` with the original type name and message, so a child can never make the parent
raise an arbitrary class.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import socket
import struct
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Required, TypeAlias, TypedDict

import orjson

from .. import errors as _errors
from .errors import (
    RemoteError,
    RemoteTraceback,
    SandboxBootError,
    SandboxClosedError,
    SandboxCrashError,
    SandboxError,
)

__all__ = [
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "Channel",
    "FrameDecoder",
    "ProtocolError",
    "encode_frame",
    "error_from_wire",
    "error_to_wire",
    "register_error",
]

PROTOCOL_VERSION = 1
MAX_FRAME = 256 << 20  # a batch of large jobs can be big; anything past this is a broken peer
_HEADER = struct.Struct(">I")
_READ_SIZE = 1 << 18
_MAX_TRACEBACK = 16_000

# parent -> child
HELLO: Final = "hello"
RUN: Final = "run"
ABORT: Final = "abort"
REPLY: Final = "reply"
STOP: Final = "stop"
# child -> parent
READY: Final = "ready"
BOOT_ERROR: Final = "boot_error"
RESULT: Final = "result"
ERROR: Final = "error"
CALL: Final = "call"
HEARTBEAT: Final = "hb"


class WireError(TypedDict, total=False):
    """An exception on the wire (see `error_to_wire`)."""

    type: Required[str]
    name: str
    message: str
    args: list[Any]
    attrs: dict[str, Any]
    traceback: str
    results: list[dict[str, Any]]


class HelloMessage(TypedDict):
    """Parent -> child, first: what to load and the limits to apply."""

    t: Literal["hello"]
    v: int
    target: str
    batch: bool
    hb: float
    rss_limit: int | None
    hard_limit: int | None
    sys_path: list[str]


class RunMessage(TypedDict):
    """Parent -> child: run invocation `i` on `jobs` (`job_to_wire` entries)."""

    t: Literal["run"]
    i: int
    jobs: Any
    batch: bool


class AbortMessage(TypedDict):
    """Parent -> child: cancel invocation `i`."""

    t: Literal["abort"]
    i: int


class ReplyMessage(TypedDict, total=False):
    """Parent -> child: the answer to call `i`, a value (`ok`) or an error (`err`)."""

    t: Required[Literal["reply"]]
    i: Required[int]
    ok: Any
    err: WireError


class StopMessage(TypedDict):
    """Parent -> child: finish (cancel what runs) and exit."""

    t: Literal["stop"]


# functional form: `async` is a keyword
ReadyMessage = TypedDict(
    "ReadyMessage", {"t": Literal["ready"], "v": int, "pid": int, "async": bool}
)
"""Child -> parent: the processor is loaded; `async` says whether it is a coroutine function."""


class BootErrorMessage(TypedDict):
    """Child -> parent: the processor could not be loaded; the child exits."""

    t: Literal["boot_error"]
    v: int
    err: WireError


class ResultMessage(TypedDict, total=False):
    """Child -> parent: invocation `i` returned `v` (with the child's RSS when limited)."""

    t: Required[Literal["result"]]
    i: Required[int]
    v: Required[Any]
    rss: int


class ErrorMessage(TypedDict, total=False):
    """Child -> parent: invocation `i` raised `err`; `retire` asks to be replaced."""

    t: Required[Literal["error"]]
    i: Required[int]
    err: Required[WireError]
    rss: int
    retire: str


class CallMessage(TypedDict):
    """Child -> parent: run Job method `m(*a)` for job handle `h`; answer call `i` (0: none)."""

    t: Literal["call"]
    i: int
    h: int
    m: str
    a: list[Any]


class HeartbeatMessage(TypedDict):
    """Child -> parent, every heartbeat_interval: its RSS and how many runs it has."""

    t: Literal["hb"]
    rss: int
    active: int


Message: TypeAlias = (
    HelloMessage
    | RunMessage
    | AbortMessage
    | ReplyMessage
    | StopMessage
    | ReadyMessage
    | BootErrorMessage
    | ResultMessage
    | ErrorMessage
    | CallMessage
    | HeartbeatMessage
)
"""Every message of the protocol."""

CANCELLED = "asyncio.exceptions.CancelledError"
"""Error type a child sends when it cancelled a run after `abort` (or on `stop`)."""


class ProtocolError(SandboxError):
    """A peer sent something that is not a valid frame or message."""


# -- frames -------------------------------------------------------------------------------


def encode_frame(messages: Sequence[Message]) -> bytes:
    """One frame holding `messages` (values may be `orjson.Fragment`s: pre-encoded JSON)."""
    body = orjson.dumps(messages)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes is over the {MAX_FRAME} limit")
    return _HEADER.pack(len(body)) + body


class FrameDecoder:
    """Reassembles frames from a byte stream."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | memoryview) -> list[dict[str, Any]]:
        """Add bytes; return the messages of every frame now complete.

        Raises ProtocolError for an oversized or undecodable frame: the stream cannot be
        trusted after that, so the peer is dropped rather than resynchronised.
        """
        buf: bytes | bytearray | memoryview
        if self._buffer:
            self._buffer += data
            buf = self._buffer
        else:
            buf = data  # the usual case: whole frames, decoded without a copy
        out: list[dict[str, Any]] = []
        pos = 0
        size = len(buf)
        while size - pos >= 4:
            (length,) = _HEADER.unpack_from(buf, pos)
            if length > MAX_FRAME:
                raise ProtocolError(f"frame length {length} is over the limit")
            end = pos + 4 + length
            if end > size:
                break
            try:
                messages = orjson.loads(buf[pos + 4 : end])
            except orjson.JSONDecodeError as exc:
                raise ProtocolError(f"undecodable frame: {exc}") from None
            if not isinstance(messages, list) or not all(type(m) is dict for m in messages):
                raise ProtocolError("a frame must be an array of objects")
            out += messages
            pos = end
        if buf is self._buffer:
            del self._buffer[:pos]
        elif pos < size:
            self._buffer = bytearray(buf[pos:])
        return out


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
        self._decoder = FrameDecoder()
        # recv_into one buffer: recv(n) would allocate n bytes per call (an mmap when large)
        self._rbuf = memoryview(bytearray(_READ_SIZE))
        self._pending: list[Message] = []
        self._out = bytearray()
        self._scheduled = False
        self._closed = False
        self._paused = False
        self._loop.add_reader(self._fd, self._readable)

    @property
    def closed(self) -> bool:
        """Whether the channel is closed (by either side)."""
        return self._closed

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
                frame = encode_frame(batch)
            except (TypeError, ProtocolError) as exc:
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
                self.close(f"write failed: {exc.strerror or exc}")
                return
            del self._out[:n]
        if self._out:
            self._loop.add_writer(self._fd, self._write)
        else:
            self._loop.remove_writer(self._fd)

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
        except ProtocolError as exc:
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
            self._out += encode_frame(batch)
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
        if not self._paused:
            self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._sock.close()
        self._on_close(reason)


# -- errors on the wire -------------------------------------------------------------------

_REGISTRY: dict[str, type[BaseException]] = {}
_ATTRS = ("field", "reason", "job_id", "queue", "operation", "size", "limit", "exitcode")
_SCALARS = (str, int, float, bool, type(None))


def _key(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_error(cls: type[Exception]) -> type[Exception]:
    """Let exceptions of type `cls` raised in a child arrive in the parent as `cls` (not as
    RemoteError). Register in the parent process, e.g. at import of the module that defines
    them. Usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise TypeError(f"register_error needs an Exception subclass, got {cls!r}")
    _REGISTRY[_key(cls)] = cls
    return cls


_BUILTIN_ERRORS = """
    ArithmeticError AssertionError AttributeError BufferError ConnectionError EOFError
    FileExistsError FileNotFoundError FloatingPointError ImportError IndexError
    InterruptedError IsADirectoryError KeyError LookupError MemoryError ModuleNotFoundError
    NameError NotADirectoryError NotImplementedError OSError OverflowError PermissionError
    ProcessLookupError RecursionError ReferenceError RuntimeError StopAsyncIteration
    StopIteration SyntaxError TimeoutError TypeError UnboundLocalError UnicodeError
    ValueError ZeroDivisionError Exception
"""
for _name in _BUILTIN_ERRORS.split():
    register_error(getattr(builtins, _name))
for _name in _errors.__all__:
    register_error(getattr(_errors, _name))
for _cls in (SandboxError, SandboxBootError, SandboxClosedError, SandboxCrashError, ProtocolError):
    register_error(_cls)


def _jsonable(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


def error_to_wire(exc: BaseException, *, with_traceback: bool = True) -> WireError:
    """Describe `exc` for the other side (type, message, args, a few attributes, traceback)."""
    cls = type(exc)
    wire: WireError = {"type": _key(cls), "name": cls.__name__, "message": str(exc)}
    if exc.args and _jsonable(list(exc.args)):
        wire["args"] = list(exc.args)
    attrs: dict[str, Any] = {}
    for name in _ATTRS:
        value = getattr(exc, name, None)
        if value is not None and isinstance(value, _SCALARS):
            attrs[name] = value
    if attrs:
        wire["attrs"] = attrs
    if isinstance(exc, RemoteError):
        wire["type"], wire["name"] = exc.type_name, exc.type_name.rpartition(".")[2]
    if with_traceback:
        text = "".join(traceback.format_exception(exc))
        wire["traceback"] = text[-_MAX_TRACEBACK:]
    if isinstance(exc, _errors.BatchError):
        wire["results"] = [_outcome_to_wire(r) for r in exc.results]
    return wire


def _outcome_to_wire(value: object) -> dict[str, Any]:
    if isinstance(value, BaseException):
        return {"e": error_to_wire(value)}
    if not _jsonable(value):
        problem = TypeError(f"return value is not JSON-serializable: {type(value).__name__}")
        return {"e": error_to_wire(problem, with_traceback=False)}
    return {"v": value}


def error_from_wire(wire: Any) -> BaseException:
    """Rebuild an exception described by `error_to_wire`, as a registered type when known,
    else as RemoteError. The sender's traceback becomes the `__cause__`."""
    if not isinstance(wire, dict):
        return ProtocolError(f"malformed error on the wire: {wire!r}")
    type_key = str(wire.get("type", "Exception"))
    message = str(wire.get("message", ""))
    cls = _REGISTRY.get(type_key)
    exc: BaseException | None = None
    if cls is not None:
        args = wire.get("args")
        args = args if isinstance(args, list) else [message] if message else []
        exc = _build(cls, args, wire)
    if exc is None:
        exc = RemoteError(type_key, message)
    tb = wire.get("traceback")
    if isinstance(tb, str) and tb:
        exc.__cause__ = RemoteTraceback(tb)
    return exc


def _build(cls: type[BaseException], args: list[Any], wire: dict[str, Any]) -> BaseException | None:
    exc: BaseException
    if issubclass(cls, _errors.BatchError):
        results = [_outcome_from_wire(r) for r in wire.get("results") or []]
        return _errors.BatchError(results, str(wire.get("message") or "batch failed"))
    try:
        exc = cls(*args)
        if str(exc) != str(wire.get("message", "")):
            raise TypeError("constructor does not give the same message")
    except Exception:
        # A constructor with another signature: make the object without calling it.
        try:
            exc = cls.__new__(cls, *args)
            exc.args = tuple(args)
        except Exception:
            return None
    attrs = wire.get("attrs")
    if isinstance(attrs, dict):
        for name in _ATTRS:
            value = attrs.get(name)
            if isinstance(value, _SCALARS) and value is not None:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(exc, name, value)
    return exc


def _outcome_from_wire(item: Any) -> Any:
    if isinstance(item, dict) and "e" in item:
        return error_from_wire(item["e"])
    if isinstance(item, dict):
        return item.get("v")
    return ProtocolError(f"malformed batch outcome {item!r}")
