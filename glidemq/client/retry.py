"""When a failed server call is tried again, and for how long.

Every call glidemq makes goes through `retrying`. A failure is one of:

- *not run*: the server (or the client before sending) refused the call, so it never ran —
  CLUSTERDOWN, TRYAGAIN, MOVED/ASK, LOADING, MASTERDOWN, READONLY, BUSY, UNBLOCKED, or no
  connection for the slot yet. Always retried.
- *missing library*: the node lost the function library (an empty node after a restart).
  The library is loaded again and the call retried.
- *ambiguous*: a time-out or a connection lost while the call was in flight. The call may
  have run. Retried only when running it twice is safe (`safe=True`):

  * safe: reads; completion and failure of a job (a second run finds the entry already
    acknowledged and reports 'stale'); fetching (a worker hands back what a try
    whose reply was lost took: glidemq/worker/forget.py); heartbeat, promotion,
    stall recovery, hand-back, pause/resume, field updates; adds whose jobs all carry a
    custom id or a deduplication id (a second run finds the job and reports a duplicate).
  * not safe: adds without a custom id (a second run would add the job twice), log lines,
    activating entries read by a blocking read (a second run would drop them), and every
    other single-job operation whose reply would change (remove, revoke, ...). These raise
    `glidemq.ConnectionError` at once: the caller decides.

- *closed*: this client was closed. Retried only when the owner has swapped in a new client.
- anything else (a script error, a wrong type) is raised as `ServerError`, never retried.

Each decision reads the error's *code*, the first word of the server's reply (`MOVED`,
`TRYAGAIN`, `NOGROUP`, `ERR`, ...; `error_code` takes it out of valkey-glide's message), and
the exception's type, never words found elsewhere in the message: a script error whose text
happens to say "function not found" is a script error. The one server reply without a code
of its own, a missing function, is the exact reply Valkey gives (`ERR Function not found`).

Retries back off exponentially with jitter and stop after `RetryPolicy.attempts` tries or
`RetryPolicy.budget` seconds; then `glidemq.ConnectionError` is raised. A raw valkey-glide
exception never leaves this module.
"""

from __future__ import annotations

import asyncio
import enum
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from glide import ClosingError as _GlideClosing
from glide import ConnectionError as _GlideConnectionError
from glide import GlideError as _GlideError
from glide import RequestError as _RequestError
from glide import TimeoutError as _GlideTimeout

from ..errors import ConnectionError, ServerError, ValidationError
from ..timing.clock import monotonic
from . import outage

__all__ = [
    "DEFAULT_RETRY",
    "ErrorCode",
    "Failure",
    "RetryPolicy",
    "classify",
    "error_code",
    "is_missing_function",
    "retry_batch",
    "retrying",
    "to_glidemq_error",
]

T = TypeVar("T")
C = TypeVar("C")

# Error codes that mean the command was not executed.
_NOT_RUN_CODES = frozenset(
    {"CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "LOADING", "MASTERDOWN", "READONLY"}
    | {"BUSY", "UNBLOCKED"}
)
# How valkey-glide names a server's error code in "An error was signalled by the server:
# - Kind: text" (plain ERR replies, and the replies inside batch results).
_SIGNALLED = "An error was signalled by the server:"
_KIND_CODES = {
    "ResponseError": "ERR",
    "Moved": "MOVED",
    "Ask": "ASK",
    "TryAgain": "TRYAGAIN",
    "ClusterDown": "CLUSTERDOWN",
    "MasterDown": "MASTERDOWN",
    "BusyLoadingError": "LOADING",
    "ReadOnly": "READONLY",
    "CrossSlot": "CROSSSLOT",
    "NoScriptError": "NOSCRIPT",
    "ExecAbortError": "EXECABORT",
    "NotBusy": "NOTBUSY",
}
# valkey-glide's own kinds for a request it never sent (no connection for the slot yet).
_NOT_SENT_KINDS = frozenset(("ConnectionNotFoundForRoute", "AllConnectionsUnavailable"))
_NOT_SENT_TEXT = "Requested connection not found"  # the same, where no kind is given
_CODE = re.compile(r"[A-Z][A-Z0-9_]*(?::[A-Z0-9_]+)?")
_MISSING_FUNCTION = "Function not found"  # Valkey's whole reply text, after ERR


class Failure(enum.Enum):
    """What a failed call means for trying it again."""

    NOT_RUN = "not_run"
    MISSING_LIBRARY = "missing_library"
    AMBIGUOUS = "ambiguous"
    CLOSED = "closed"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry a failed call. Times in seconds.

    attempts: tries in all (1: never retry); budget: no new try starts after this much time
    since the first; first_delay / max_delay: the backoff between tries (doubling, with
    jitter between half and the full delay).
    """

    attempts: int = 20
    budget: float = 10.0
    first_delay: float = 0.05
    max_delay: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise ValidationError("retry.attempts", "must be an integer")
        if self.attempts < 1:
            raise ValidationError("retry.attempts", "must be >= 1")
        for name in ("budget", "first_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValidationError(f"retry.{name}", "must be a number >= 0")

    def delay(self, attempt: int) -> float:
        """The pause after failed try number `attempt` (1-based)."""
        full = min(float(self.max_delay), self.first_delay * 2.0 ** (attempt - 1))
        return full * (0.5 + random.random() / 2)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=1)


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """A server error reply taken apart: its `code` (`WRONGTYPE`, `ERR`, `ERR:STATE`, ...;
    None for an error of the client's own), valkey-glide's `kind` when it named one
    (`Moved`, `ConnectionNotFoundForRoute`, ...), and the `text` after them."""

    code: str | None
    kind: str | None
    text: str


def error_code(exc: BaseException) -> ErrorCode:
    """The code of a valkey-glide error, from the forms valkey-glide writes: `CODE: text`,
    and `An error was signalled by the server: - Kind: text` (ERR replies, batch results)."""
    text = str(exc)
    if not isinstance(exc, _RequestError) or isinstance(exc, _GlideTimeout | _GlideConnectionError):
        return ErrorCode(None, None, text)
    if text.startswith(_SIGNALLED):
        kind, _, rest = text[len(_SIGNALLED) :].strip().removeprefix("- ").partition(": ")
        code = _KIND_CODES.get(kind)
        if code is None and _CODE.fullmatch(kind):
            code = kind  # a code valkey-glide passes on as it is
        return ErrorCode(code, kind or None, rest)
    head, sep, rest = text.partition(": ")
    if sep and _CODE.fullmatch(head):
        return ErrorCode(head, None, rest)
    head, _, rest = text.lstrip("-").partition(" ")
    if _CODE.fullmatch(head):
        return ErrorCode(head, None, rest)
    return ErrorCode(None, None, text)


def _not_sent(found: ErrorCode) -> bool:
    """Whether valkey-glide says it had no connection to send the request on (by the kind
    it names, `ConnectionNotFoundForRoute`, or its words for it where it names none)."""
    if found.kind is not None:
        return found.kind in _NOT_SENT_KINDS
    return _NOT_SENT_TEXT in found.text or any(k in found.text for k in _NOT_SENT_KINDS)


def is_missing_function(exc: BaseException) -> bool:
    """Whether the server said the called library function does not exist (Valkey's reply
    `ERR Function not found`, exactly)."""
    found = error_code(exc)
    return found.code == "ERR" and found.text.strip() == _MISSING_FUNCTION


def classify(exc: BaseException) -> Failure:
    """What `exc`, raised by a valkey-glide call, means for trying the call again."""
    if isinstance(exc, _GlideClosing):
        return Failure.CLOSED
    if not isinstance(exc, _RequestError):
        return Failure.FATAL
    found = error_code(exc)
    if found.code is None and _not_sent(found):  # the client's own error, never a reply
        return Failure.NOT_RUN
    if isinstance(exc, _GlideTimeout | _GlideConnectionError):
        return Failure.AMBIGUOUS
    if is_missing_function(exc):
        return Failure.MISSING_LIBRARY
    if found.code is not None and found.code in _NOT_RUN_CODES:
        return Failure.NOT_RUN
    return Failure.FATAL


def to_glidemq_error(exc: BaseException, what: str) -> ConnectionError | ServerError:
    """The glidemq error for a valkey-glide error of a call that is not retried."""
    if classify(exc) in (Failure.FATAL, Failure.MISSING_LIBRARY):
        return ServerError(f"{what}: {exc}", error_code(exc).code)
    return ConnectionError(f"{what}: {type(exc).__name__}: {exc}")


async def retrying(
    send: Callable[[C], Awaitable[T]],
    client: Callable[[], C],
    *,
    what: str,
    safe: bool,
    policy: RetryPolicy = DEFAULT_RETRY,
    reload_library: Callable[[C], Awaitable[None]] | None = None,
    on_transport_failure: Callable[[BaseException], Awaitable[None]] | None = None,
    on_success: Callable[[], None] | None = None,
    keep_trying: Callable[[], bool] | None = None,
    where: str | None = None,
) -> T:
    """Run `send(client())`, retrying as the module doc says.

    `client` is asked again before every try, so an owner that replaced a broken client is
    picked up. `reload_library` loads the function library into the node that lost it.
    `on_transport_failure(exc)` runs after each time-out or connection failure (a hook that
    may replace the client); `on_success` after the call succeeds; `keep_trying`, when given
    and False, ends the retries early. `where` (the server's address) keeps the outage
    record (glidemq.client.outage) that a ConnectionError then names.
    """
    started = monotonic()
    attempt = 0
    reloaded = False
    while True:
        attempt += 1
        used = client()
        try:
            result = await send(used)
        except _GlideError as exc:
            kind = classify(exc)
            detail = f"{what}: {type(exc).__name__}: {exc}"
            if kind is Failure.FATAL:
                raise ServerError(f"{what}: {exc}", error_code(exc).code) from exc
            if kind is Failure.MISSING_LIBRARY:
                if reload_library is None or reloaded:
                    raise ServerError(f"{what}: {exc}", "ERR") from exc
                reloaded = True
                await reload_library(used)
                continue  # the call did not run: try again at once, not counted
            if kind is Failure.CLOSED:
                if client() is used:
                    raise ConnectionError(f"{detail} (client closed)") from exc
                continue  # the owner swapped in a new client
            if kind is Failure.AMBIGUOUS:
                outage.failed(where, time.time() - (monotonic() - started))
                if on_transport_failure is not None:
                    await on_transport_failure(exc)
                if not safe:
                    raise ConnectionError(
                        _lost(where, f"{detail} (it may have run: not retried)")
                    ) from exc
            elapsed = monotonic() - started
            out_of_time = attempt >= policy.attempts or elapsed >= policy.budget
            if out_of_time or (keep_trying is not None and not keep_trying()):
                tries = "1 try" if attempt == 1 else f"{attempt} tries"
                raise ConnectionError(
                    _lost(where, f"{detail} (gave up after {tries} in {elapsed:.1f} s)")
                ) from exc
            pause = policy.delay(attempt)
            await asyncio.sleep(min(pause, max(0.0, policy.budget - elapsed)))
        else:
            if on_success is not None:
                on_success()
            if outage.OPEN and where is not None:
                outage.ok(where)
            return result


def _lost(where: str | None, detail: str) -> str:
    """`detail`, after what is known of an outage of `where`."""
    lost = outage.describe(where)
    return f"{lost}: {detail}" if lost else detail


async def retry_batch(
    send: Callable[[list[int]], Awaitable[Sequence[Any] | None]],
    count: int,
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
) -> list[Any]:
    """Run `count` calls as one non-atomic batch and send again, alone and with backoff, the
    calls answered with an error meaning "did not run" (a slot that moved mid-batch).

    `send(indices)` sends the calls at those indices and returns their replies in order.
    Returns one reply per call; a call still failing after the policy's tries keeps its
    error as its reply.
    """
    replies: list[Any] = [None] * count
    todo = list(range(count))
    started = monotonic()
    attempt = 0
    while True:
        attempt += 1
        again = []
        for i, reply in zip(todo, list(await send(todo) or []), strict=True):
            replies[i] = reply
            if isinstance(reply, _GlideError) and classify(reply) is Failure.NOT_RUN:
                again.append(i)
        elapsed = monotonic() - started
        if not again or attempt >= policy.attempts or elapsed >= policy.budget:
            return replies
        todo = again
        await asyncio.sleep(min(policy.delay(attempt), max(0.0, policy.budget - elapsed)))
