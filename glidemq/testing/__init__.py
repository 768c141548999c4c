"""Queues for unit tests without a Valkey server: the real Queue, Worker, QueueEvents and
FlowProducer on an in-memory server that runs glidemq's own function library.

    from glidemq.testing import ManualClock, MemoryServer, TestQueue, TestWorker

    server = MemoryServer(clock=ManualClock())
    queue = TestQueue("emails", connection=server)
    worker = TestWorker("emails", send, connection=server)

Every job state, option, error and event is the real engine's; time follows the server's
clock (a ManualClock moves only when the test advances it). What needs other processes (the
sandbox) raises UnsupportedOptionError naming it.
"""

from __future__ import annotations

from ..errors import UnsupportedOptionError
from ..job.job import Job as TestJob
from ..memory import Clock, ManualClock, MemoryServer, SystemClock
from .events import TestQueueEvents
from .producer import TestFlowProducer
from .queue import TestQueue
from .server import default_server
from .support import (
    UNSUPPORTED_JOB_METHODS,
    UNSUPPORTED_QUEUE_METHODS,
    UNSUPPORTED_WORKER_METHODS,
    UNSUPPORTED_WORKER_OPTIONS,
)
from .worker import TestWorker

__all__ = [
    "UNSUPPORTED_JOB_METHODS",
    "UNSUPPORTED_QUEUE_METHODS",
    "UNSUPPORTED_WORKER_METHODS",
    "UNSUPPORTED_WORKER_OPTIONS",
    "Clock",
    "ManualClock",
    "MemoryServer",
    "SystemClock",
    "TestFlowProducer",
    "TestJob",
    "TestQueue",
    "TestQueueEvents",
    "TestWorker",
    "UnsupportedOptionError",
    "default_server",
]
