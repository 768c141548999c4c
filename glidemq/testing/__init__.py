"""In-memory queues for unit tests: the Queue and Worker API without a Valkey server.

from glidemq.testing import ManualClock, MemoryServer, TestQueue, TestWorker

server = MemoryServer(clock=ManualClock())
queue = TestQueue("emails", connection=server)
worker = TestWorker("emails", send, connection=server)

The in-memory engine keeps the real engine's job states, transitions, options, errors and
events, flows (TestFlowProducer), job schedulers, groups, ordering keys and LIFO; what it
does not emulate raises UnsupportedOptionError naming the feature.
"""

from __future__ import annotations

from ..errors import UnsupportedOptionError
from .clock import Clock, ManualClock, SystemClock
from .events import TestQueueEvents
from .job import TestJob
from .producer import TestFlowProducer
from .queue import TestQueue
from .server import MemoryServer, default_server
from .support import (
    UNSUPPORTED_JOB_METHODS,
    UNSUPPORTED_QUEUE_METHODS,
    UNSUPPORTED_WORKER_METHODS,
)
from .worker import TestWorker

__all__ = [
    "UNSUPPORTED_JOB_METHODS",
    "UNSUPPORTED_QUEUE_METHODS",
    "UNSUPPORTED_WORKER_METHODS",
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
