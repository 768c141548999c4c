"""What a failed run means for its job: whether it is tried again and after how long, what
is stored about the failure, and what the worker counts and emits once the server recorded
it."""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import GlideMQError, Retry, UnrecoverableError, ValidationError
from ..types import WorkerOptions, job_retention
from .backoff import retry_delay

if TYPE_CHECKING:
    from ..emitter import Emitter
    from ..job.job import Job

__all__ = ["JobFailure", "expired_error", "job_failure", "record_failure"]

_STACK_CHARS = 4000  # the stored stack trace keeps its last part, where the error is
_REASON_CHARS = 4000  # events carry the reason: keep them small
log = logging.getLogger("glidemq.worker")
_retry_hinted: set[str] = set()  # queues whose Retry-without-attempts was explained


class _Expired(GlideMQError):
    """A job picked up after its ttl ran out (reason `expired`)."""


def expired_error() -> GlideMQError:
    """The error a job fails with when its ttl ran out before it started."""
    return _Expired("expired")


@dataclass(frozen=True, slots=True)
class JobFailure:
    """How the engine records one failed run."""

    delay: int
    """Milliseconds before the next try, should attempts remain; negative: fail for good."""
    reason: str
    keep: tuple[int, int]
    """(keepCount, keepAge) of the failed set, should the job fail for good."""
    stack: str


def job_failure(
    job: Job[Any, Any],
    error: BaseException,
    opts: WorkerOptions,
    keep_default: tuple[int, int],
    events: Emitter,
) -> JobFailure:
    """The record of `job`'s run failing with `error`. UnrecoverableError, an expired job
    and a discarded job are final; otherwise the job's backoff gives the delay (an unknown
    strategy is reported as an `error` event on `events`, and the retry is immediate)."""
    final = isinstance(error, UnrecoverableError | _Expired) or job.discarded
    delay = -1
    asked = getattr(error, "delay", None) if isinstance(error, Retry) else None
    if not final and asked is not None:
        delay = asked
    elif not final:
        try:
            delay = retry_delay(
                job.opts.get("backoff"), job.attempts_made + 1, error, opts.backoff_strategies
            )
        except KeyError as exc:
            events.emit(
                "error", ValidationError("backoff.type", f"no backoff strategy named {exc}")
            )
            delay = 0
    return JobFailure(
        delay,
        (str(error) or type(error).__name__)[:_REASON_CHARS],
        job_retention(job.opts, "removeOnFail", keep_default),
        "".join(traceback.format_exception(error))[-_STACK_CHARS:],
    )


class _FailureCounter(Protocol):
    failed_count: int
    events: Emitter


def record_failure(
    worker: _FailureCounter, job: Job[Any, Any], error: BaseException, reason: str, status: str
) -> None:
    """The engine answered a failure with `status`: for `retry` or `failed`, count it,
    update the job's snapshot and emit `failed`; anything else (stale, missing) is not the
    worker's failure to report."""
    if status in ("retry", "failed"):
        worker.failed_count += 1
        job.attempts_made += 1
        job.failed_reason = reason
        job.state = "failed" if status == "failed" else "retrying"
        worker.events.emit("failed", job, error)
    if status == "failed" and isinstance(error, Retry):
        _hint_retry(job)


def _hint_retry(job: Job[Any, Any]) -> None:
    """A job raised Retry with no attempt left: say why it failed, once per queue (the
    default attempts=1 allows no retry at all, which surprises Celery users)."""
    queue = job.queue_name
    if queue in _retry_hinted:
        return
    _retry_hinted.add(queue)
    tries = job.max_attempts or 1
    log.warning(
        "glidemq: queue %s: job %s raised Retry but had no attempt left (attempts=%d counts "
        "every try, the first one too; the default is 1): it failed. Give the job more "
        "attempts (Celery's max_retries=N is attempts=N+1). Said once per queue.",
        queue,
        job.id,
        tries,
    )
