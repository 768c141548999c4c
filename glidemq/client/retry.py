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
    acknowledged and reports 'stale'); fetching (entries whose reply was lost stay in this
    worker's pending list and come back through stall recovery); heartbeat, promotion,
    stall recovery, hand-back, pause/resume, field updates; adds whose jobs all carry a
    custom id or a deduplication id (a second run finds the job and reports a duplicate).
  * not safe: adds without a custom id (a second run would add the job twice), log lines,
    activating entries read by a blocking read (a second run would drop them), and every
    other single-job operation whose reply would change (remove, revoke, ...). These raise
    `glidemq.ConnectionError` at once: the caller decides.

- *closed*: this client was closed. Retried only when the owner has swapped in a new client.
- anything else (a script error, a wrong type) is raised as `ServerError`, never retried.

Retries back off exponentially with jitter and stop after `RetryPolicy.attempts` tries or
`RetryPolicy.budget` seconds; then `glidemq.ConnectionError` is raised. A raw valkey-glide
exception never leaves this module.
"""

from __future__ import annotations

import asyncio
import enum
import random
import re
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

__all__ = [
    "DEFAULT_RETRY",
    "Failure",
    "RetryPolicy",
    "classify",
    "is_missing_function",
    "retry_batch",
    "retrying",
    "to_glidemq_error",
]

T = TypeVar("T")
C = TypeVar("C")

# Error replies that mean the command was not executed (first word of the reply).
_NOT_RUN_PREFIXES = (
    "CLUSTERDOWN",
    "TRYAGAIN",
    "MOVED",
    "ASK",
    "LOADING",
    "MASTERDOWN",
    "READONLY",
    "BUSY",
    "UNBLOCKED",
)
# The same replies as valkey-glide words them inside batch results ("... - Moved: 6783 h:p").
_NOT_RUN_KINDS = re.compile(
    r"-\s*(Moved|Ask|TryAgain|ClusterDown|MasterDown|BusyLoadingError|ReadOnly"
    r"|CLUSTERDOWN|TRYAGAIN|MOVED|ASK|LOADING|MASTERDOWN|READONLY)\b"
)
# Client-side messages for a request that was never sent.
_NOT_SENT_MARKERS = ("ConnectionNotFoundForRoute", "Requested connection not found")


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


def is_missing_function(exc: BaseException) -> bool:
    """Whether the server said the called library function does not exist."""
    text = str(exc).lower()
    return "function not found" in text or "no such function" in text


def classify(exc: BaseException) -> Failure:
    """What `exc`, raised by a valkey-glide call, means for trying the call again."""
    if isinstance(exc, _GlideClosing):
        return Failure.CLOSED
    text = str(exc)
    if any(marker in text for marker in _NOT_SENT_MARKERS):
        return Failure.NOT_RUN
    if isinstance(exc, _GlideTimeout | _GlideConnectionError):
        return Failure.AMBIGUOUS
    if isinstance(exc, _RequestError):
        if is_missing_function(exc):
            return Failure.MISSING_LIBRARY
        head = text.lstrip("-").split(" ", 1)[0].split(":", 1)[0].upper()
        if head in _NOT_RUN_PREFIXES or _NOT_RUN_KINDS.search(text):
            return Failure.NOT_RUN
        return Failure.FATAL
    if isinstance(exc, _GlideError) and "connection" in text.lower():
        return Failure.AMBIGUOUS
    return Failure.FATAL


def to_glidemq_error(exc: BaseException, what: str) -> ConnectionError | ServerError:
    """The glidemq error for a valkey-glide error of a call that is not retried."""
    if classify(exc) in (Failure.FATAL, Failure.MISSING_LIBRARY):
        return ServerError(f"{what}: {exc}")
    return ConnectionError(f"{what}: {type(exc).__name__}: {exc}")


async def retrying(
    send: Callable[[C], Awaitable[T]],
    client: Callable[[], C],
    *,
    what: str,
    safe: bool,
    policy: RetryPolicy = DEFAULT_RETRY,
    reload_library: Callable[[C], Awaitable[None]] | None = None,
    on_transport_failure: Callable[[], Awaitable[None]] | None = None,
    on_success: Callable[[], None] | None = None,
    keep_trying: Callable[[], bool] | None = None,
) -> T:
    """Run `send(client())`, retrying as the module doc says.

    `client` is asked again before every try, so an owner that replaced a broken client is
    picked up. `reload_library` loads the function library into the node that lost it.
    `on_transport_failure` runs after each time-out or connection failure (a hook that may
    replace the client); `on_success` after the call succeeds; `keep_trying`, when given
    and False, ends the retries early.
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
                raise ServerError(f"{what}: {exc}") from exc
            if kind is Failure.MISSING_LIBRARY:
                if reload_library is None or reloaded:
                    raise ServerError(f"{what}: {exc}") from exc
                reloaded = True
                await reload_library(used)
                continue  # the call did not run: try again at once, not counted
            if kind is Failure.CLOSED:
                if client() is used:
                    raise ConnectionError(f"{detail} (client closed)") from exc
                continue  # the owner swapped in a new client
            if kind is Failure.AMBIGUOUS:
                if on_transport_failure is not None:
                    await on_transport_failure()
                if not safe:
                    raise ConnectionError(f"{detail} (it may have run: not retried)") from exc
            elapsed = monotonic() - started
            out_of_time = attempt >= policy.attempts or elapsed >= policy.budget
            if out_of_time or (keep_trying is not None and not keep_trying()):
                raise ConnectionError(
                    f"{detail} (gave up after {attempt} tries in {elapsed:.1f} s)"
                ) from exc
            pause = policy.delay(attempt)
            await asyncio.sleep(min(pause, max(0.0, policy.budget - elapsed)))
        else:
            if on_success is not None:
                on_success()
            return result


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
