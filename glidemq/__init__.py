"""glidemq: fast, reliable background jobs for Python on Valkey.

async with Queue("emails") as queue:
    await queue.add("welcome", {"to": "ada@example.com"})

async def send(job: Job) -> str: ...
async with Worker("emails", send, concurrency=50):
    ...
"""

from __future__ import annotations

from .connection import ConnectionOptions
from .errors import (
    BatchError,
    ConnectionError,
    DelayedError,
    GlideMQError,
    JobNotFoundError,
    JobStateError,
    JobTimeoutError,
    LibraryError,
    PayloadTooLargeError,
    ServerError,
    UnrecoverableError,
    UnsupportedOptionError,
    ValidationError,
)
from .events import QueueEvent, QueueEvents
from .job import Job
from .processor import ProcessorSpec, processor
from .queue import JobCounts, Queue
from .sandbox import SandboxOptions
from .shutdown import GracefulShutdown
from .types import Backoff, BatchOptions, Deduplication, JobOptions, KeepJobs, WorkerOptions
from .worker import Processor, Worker

__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "BatchError",
    "BatchOptions",
    "ConnectionError",
    "ConnectionOptions",
    "Deduplication",
    "DelayedError",
    "GlideMQError",
    "GracefulShutdown",
    "Job",
    "JobCounts",
    "JobNotFoundError",
    "JobOptions",
    "JobStateError",
    "JobTimeoutError",
    "KeepJobs",
    "LibraryError",
    "PayloadTooLargeError",
    "Processor",
    "ProcessorSpec",
    "Queue",
    "QueueEvent",
    "QueueEvents",
    "SandboxOptions",
    "ServerError",
    "UnrecoverableError",
    "UnsupportedOptionError",
    "ValidationError",
    "Worker",
    "WorkerOptions",
    "__version__",
    "processor",
]
