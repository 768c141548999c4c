"""The sandbox IPC protocol, both ends: the messages and errors on the wire.

Transport: one Unix stream socket per child, carrying frames of messages (`channel.py`).

A message is a JSON object with `t` (its type) and, for the ones about work, `i` (the
invocation id, chosen by the parent per run; or the call id, chosen by the child per proxied
call). The parent opens with `hello`; the child answers `ready` or `boot_error`.

    parent -> child   hello  {v, target, batch, hb, rss_limit, hard_limit, sys_path, cap,
                                result_limit}
                      run    {i, jobs: [job...], batch}       run a job (or a batch)
                      abort  {i}                              cancel that run
                      take   {ids}                            give back these runs if not started
                      reply  {i, ok: value} | {i, err: error} answer to a proxied call
                      stop   {}                               finish and exit
    child -> parent   ready  {v, pid, async}
                      boot_error {v, err: error}
                      result {i, v, rss?, retire?}            the run returned v
                      error  {i, err: error, rss?, retire?}   the run raised
                      back   {ids}                            runs given back, never started
                      call   {i, h, m, a}                     Job method m(*a) on job handle h
                                                              (i = 0: no reply wanted)
                      hb     {rss, active}                    heartbeat

Pipelining: the parent may send a child more runs than it runs at once (`cap`: 1 for a sync
processor). The child starts them in the order they came, as running ones end, and starts a
queued run only once the outcomes sent before it are written to the socket; so the parent,
reading the stream in order, knows which runs had started when a child dies. `retire` on an
outcome means the child starts nothing more (it sends `back` for what it still holds).

Errors cross as {type, name, message, args, attrs, traceback, results?}. The receiving side
rebuilds only types in its registry (`register_error`); anything else becomes a
`RemoteError` with the original type name and message, so a child can never make the parent
raise an arbitrary class.
"""

from __future__ import annotations

import builtins
import contextlib
import traceback
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
    "PROTOCOL_VERSION",
    "ProtocolError",
    "error_from_wire",
    "error_to_wire",
    "register_error",
]

PROTOCOL_VERSION = 2
_MAX_TRACEBACK = 16_000

# parent -> child
HELLO: Final = "hello"
RUN: Final = "run"
ABORT: Final = "abort"
TAKE: Final = "take"
REPLY: Final = "reply"
STOP: Final = "stop"
# child -> parent
READY: Final = "ready"
BOOT_ERROR: Final = "boot_error"
RESULT: Final = "result"
ERROR: Final = "error"
BACK: Final = "back"
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
    cap: int
    result_limit: int | None


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


class TakeMessage(TypedDict):
    """Parent -> child: give back those of runs `ids` that have not started."""

    t: Literal["take"]
    ids: list[int]


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
    """Child -> parent: invocation `i` returned `v` (with the child's RSS when limited);
    `retire` says the child starts no more runs and asks to be replaced."""

    t: Required[Literal["result"]]
    i: Required[int]
    v: Required[Any]
    rss: int
    retire: str


class ErrorMessage(TypedDict, total=False):
    """Child -> parent: invocation `i` raised `err`; `retire` asks to be replaced."""

    t: Required[Literal["error"]]
    i: Required[int]
    err: Required[WireError]
    rss: int
    retire: str


class BackMessage(TypedDict):
    """Child -> parent: runs `ids` were dropped before they started (taken back, aborted
    while queued, or held by a child that retires)."""

    t: Literal["back"]
    ids: list[int]


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
    | TakeMessage
    | ReplyMessage
    | StopMessage
    | ReadyMessage
    | BootErrorMessage
    | ResultMessage
    | ErrorMessage
    | BackMessage
    | CallMessage
    | HeartbeatMessage
)
"""Every message of the protocol."""

CANCELLED = "asyncio.exceptions.CancelledError"
"""Error type a child sends when it cancelled a run after `abort` (or on `stop`)."""


class ProtocolError(SandboxError):
    """A peer sent something that is not a valid frame or message."""


# -- errors on the wire -------------------------------------------------------------------

_REGISTRY: dict[str, type[BaseException]] = {}
_ATTRS = ("field", "reason", "job_id", "queue", "operation", "size", "limit", "exitcode", "delay")
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
