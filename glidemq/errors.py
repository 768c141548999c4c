"""The glidemq error tree: every error the library raises on purpose is a GlideMQError."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BatchError",
    "ConnectionError",
    "DelayedError",
    "GlideMQError",
    "JobNotFoundError",
    "JobStateError",
    "JobTimeoutError",
    "LibraryError",
    "PayloadTooLargeError",
    "ServerError",
    "UnrecoverableError",
    "UnsupportedOptionError",
    "ValidationError",
]


class GlideMQError(Exception):
    """Root of every error glidemq raises on purpose."""


class ValidationError(GlideMQError, ValueError):
    """An argument or option is invalid; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class PayloadTooLargeError(ValidationError):
    """Job data is larger than the limit (checked before compression, before any write)."""

    def __init__(self, size: int, limit: int, field: str = "data") -> None:
        super().__init__(field, f"serialized payload is {size} bytes, the limit is {limit}")
        self.size = size
        self.limit = limit


class UnsupportedOptionError(ValidationError):
    """An option the wire protocol names but this version does not enforce yet."""


class ConnectionError(GlideMQError):
    """The Valkey server could not be reached or the connection was lost."""


class ServerError(GlideMQError):
    """The server answered a command with an error glidemq did not expect."""


class LibraryError(ServerError):
    """The glidemq function library could not be loaded or has the wrong version."""


class JobNotFoundError(GlideMQError, LookupError):
    """No job with this id exists in the queue."""

    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found in queue {queue!r}")
        self.queue = queue
        self.job_id = job_id


class JobStateError(GlideMQError):
    """The operation is not possible in the job's current state."""

    def __init__(self, job_id: str, operation: str, detail: str) -> None:
        super().__init__(f"cannot {operation} job {job_id!r}: {detail}")
        self.job_id = job_id
        self.operation = operation


class JobTimeoutError(GlideMQError, TimeoutError):
    """A job ran longer than its timeout, or a wait for a job ran out of time."""


class UnrecoverableError(GlideMQError):
    """Raised by a processor: fail the job now, without using its remaining attempts."""


class DelayedError(GlideMQError):
    """Raised after `Job.move_to_delayed`: the job went back to delayed, not failed."""


class BatchError(GlideMQError):
    """Raised by a batch processor: some jobs failed, the others succeeded.

    `results` holds one entry per job: the job's result, or the exception it failed with.
    """

    def __init__(self, results: Sequence[object], message: str = "some jobs in the batch failed"):
        super().__init__(message)
        self.results = list(results)
