"""One behaviour, three backends: the engine on standalone Valkey, on the 3+3 cluster, and
the in-memory glidemq.testing engine (with a manual clock).

Tests get a `backend` with `queue`, `worker(processor, **settings)`, `elapse(ms)` and
`now_ms()`, and must pass unchanged on all three.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from glidemq import ConnectionOptions, FlowProducer, Queue, QueueEvents, Worker
from glidemq.keys import queue_slot
from glidemq.testing import (
    ManualClock,
    MemoryServer,
    TestFlowProducer,
    TestQueue,
    TestQueueEvents,
    TestWorker,
)
from tests.helpers import FAST

GUARD = 25
"""ms a start stays in a sliding rate window past its duration (the library's guard: 2% of
the duration, 1 to 20 ms): a test that moves a manual clock past a window adds it."""


class Backend:
    """A queue on one backend, and workers for it; cleaned up after the test."""

    def __init__(self, kind: str, name: str, connection: Any, clock: ManualClock | None):
        self.kind = kind
        self.name = name
        self.connection = connection
        self.clock = clock
        self.queue: Any = (
            TestQueue(name, connection=connection)
            if kind == "memory"
            else Queue(name, connection=connection)
        )
        self.workers: list[Any] = []
        self.readers: list[Any] = []
        self.others: list[Any] = []
        self.producers: list[Any] = []

    def other_queue(self) -> Any:
        """A second queue whose name shares the cluster slot of `queue` (flows may span
        queues of one slot); cleaned up with the backend."""
        slot = queue_slot(self.name)
        k = 1
        while queue_slot(f"{self.name}-{k}") != slot:
            k += 1
        name = f"{self.name}-{k}"
        cls: Any = TestQueue if self.kind == "memory" else Queue
        other = cls(name, connection=self.connection)
        self.others.append(other)
        return other

    def flow_producer(self) -> Any:
        """A FlowProducer on this backend (TestFlowProducer in memory)."""
        cls: Any = TestFlowProducer if self.kind == "memory" else FlowProducer
        producer = cls(connection=self.connection)
        self.producers.append(producer)
        return producer

    def worker(self, processor: Callable[..., Any], **settings: Any) -> Any:
        """A worker of this queue, not started; real ones use the fast test timings."""
        return self.worker_of(self.name, processor, **settings)

    def worker_of(self, name: str, processor: Callable[..., Any], **settings: Any) -> Any:
        """A worker of queue `name` on this backend (not started)."""
        merged = {**FAST, **settings}
        cls: Any = TestWorker if self.kind == "memory" else Worker
        worker = cls(name, processor, connection=self.connection, **merged)
        self.workers.append(worker)
        return worker

    def queue_events(self) -> Any:
        """A reader of this queue's events (not started)."""
        cls: Any = TestQueueEvents if self.kind == "memory" else QueueEvents
        reader = cls(self.name, connection=self.connection, block_timeout=100)
        self.readers.append(reader)
        return reader

    def now_ms(self) -> int:
        """The backend's time in ms: the manual clock in memory, wall time otherwise."""
        return self.clock.now_ms() if self.clock is not None else int(time.time() * 1000)

    async def elapse(self, ms: int) -> None:
        """Let `ms` milliseconds pass: advance the manual clock, or sleep."""
        if self.clock is not None:
            self.clock.advance(ms)
            await asyncio.sleep(0.01)
        else:
            await asyncio.sleep(ms / 1000)

    async def cleanup(self) -> None:
        for worker in self.workers:
            await worker.close(force=True)
        for reader in self.readers:
            await reader.close()
        for producer in self.producers:
            await producer.close()
        try:
            for other in self.others:
                await other.obliterate(force=True)
                await other.close()
            await self.queue.obliterate(force=True)
        finally:
            await self.queue.close()


@pytest.fixture(params=["standalone", "cluster", "memory"])
async def backend(request: pytest.FixtureRequest, queue_name: str) -> AsyncIterator[Backend]:
    """The same queue API on standalone Valkey, the 3+3 cluster, and in memory."""
    connection: Any
    clock = None
    if request.param == "standalone":
        server = request.getfixturevalue("valkey_server")
        connection = ConnectionOptions.from_url(server.url)
    elif request.param == "cluster":
        cluster = request.getfixturevalue("valkey_cluster")
        connection = ConnectionOptions(addresses=tuple(cluster.addresses), cluster=True)
    else:
        clock = ManualClock()
        connection = MemoryServer(clock=clock)
    b = Backend(request.param, queue_name, connection, clock)
    try:
        yield b
    finally:
        await b.cleanup()
