"""Locust load test of a glidemq queue: users add jobs, and add jobs and wait for results.

    glidemq-bench locust                      # embedded Valkey + worker, headless, 30 s
    locust -f benchmarks/locustfile.py --headless -u 50 -r 10 -t 30s

Each user calls `Queue.add` (request name `add`) and `Queue.add_and_wait` (request name
`add_and_wait`: add a job and wait for a worker to finish it), 3 to 1, and every call is
reported to Locust as a request event of type `glidemq`, so Locust's statistics, CSV
output and web UI show them. Settings, from the environment:

- GLIDEMQ_URL: the server (default valkey://127.0.0.1:6379);
- GLIDEMQ_LOCUST_QUEUE: the queue (default `locust`); `add_and_wait` needs a worker on it
  (`glidemq-bench locust` starts one);
- GLIDEMQ_LOCUST_WAIT_TIMEOUT: seconds `add_and_wait` waits (default 10).

Locust runs users as gevent greenlets; glidemq is asyncio. So each Locust process runs one
asyncio loop (uvloop) on a real thread, with one Queue, and users hand it their calls and
wait cooperatively for the answer: a greenlet waiting for a job never blocks the others.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import gevent.monkey  # type: ignore[import-untyped]  # (gevent ships no type stubs)
from gevent.event import AsyncResult  # type: ignore[import-untyped]
from gevent.hub import get_hub  # type: ignore[import-untyped]
from locust import User, between, events, task

from glidemq import Queue
from glidemq.process.loop import loop_factory

__all__ = ["GlidemqUser", "QueueClient"]

URL = os.environ.get("GLIDEMQ_URL", "valkey://127.0.0.1:6379")
QUEUE = os.environ.get("GLIDEMQ_LOCUST_QUEUE", "locust")
WAIT_TIMEOUT = float(os.environ.get("GLIDEMQ_LOCUST_WAIT_TIMEOUT", "10"))


class QueueClient:
    """One Queue on an asyncio loop in a thread of its own, callable from greenlets."""

    def __init__(self, url: str, name: str) -> None:
        self.queue: Queue[Any, Any] = Queue(name, connection=url)
        self.loop = _new_loop()
        # A real OS thread: Locust has patched `threading` into greenlets, and a loop that
        # blocks in epoll inside a greenlet would stop every user.
        start_thread = gevent.monkey.get_original("_thread", "start_new_thread")
        start_thread(self.loop.run_forever, ())

    @property
    def has_add_and_wait(self) -> bool:
        """Whether this glidemq has `Queue.add_and_wait`."""
        return hasattr(self.queue, "add_and_wait")

    def call(self, work: Callable[[Queue[Any, Any]], Awaitable[Any]]) -> Any:
        """Run `work(queue)` on the loop; the calling greenlet waits, the others go on."""
        done: AsyncResult = AsyncResult()
        hub = get_hub()

        async def run() -> Any:
            return await work(self.queue)

        def finished(task: asyncio.Task[Any]) -> None:
            # On the loop's thread: hand the outcome over to the hub's thread.
            hub.loop.run_callback_threadsafe(_settle, done, task)

        def start() -> None:
            self.loop.create_task(run()).add_done_callback(finished)

        self.loop.call_soon_threadsafe(start)
        return done.get()

    def close(self) -> None:
        """Close the Queue and stop the loop."""
        try:
            self.call(lambda q: q.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)


def _new_loop() -> asyncio.AbstractEventLoop:
    return (loop_factory() or asyncio.new_event_loop)()


def _settle(done: AsyncResult, task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        done.set_exception(asyncio.CancelledError())
    elif (error := task.exception()) is not None:
        done.set_exception(error)
    else:
        done.set(task.result())


_client: QueueClient | None = None


def client() -> QueueClient:
    """This process's QueueClient (made on first use)."""
    global _client
    if _client is None:
        _client = QueueClient(URL, QUEUE)
    return _client


@events.test_stop.add_listener  # type: ignore[untyped-decorator]
def _close(**_: Any) -> None:
    global _client
    if _client is not None:
        _client.close()
        _client = None


class GlidemqUser(User):
    """Adds jobs (weight 3) and adds-and-waits (weight 1, when glidemq has it)."""

    wait_time = between(0.0, 0.01)

    def _timed(self, name: str, work: Callable[[Queue[Any, Any]], Awaitable[Any]]) -> None:
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            client().call(work)
        except Exception as exc:
            error = exc
        events.request.fire(  # type: ignore[no-untyped-call]
            request_type="glidemq",
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=0,
            exception=error,
            context={},
        )

    @task(3)
    def add(self) -> None:
        """Queue.add: one job, no waiting for it."""
        self._timed("add", lambda q: q.add("locust", {"t": time.time()}))

    @task(1)
    def add_and_wait(self) -> None:
        """Queue.add_and_wait: one job, waiting for its result (plain add when missing)."""
        if not client().has_add_and_wait:
            self.add()
            return
        self._timed(
            "add_and_wait",
            lambda q: q.add_and_wait("locust", {"t": time.time()}, timeout=WAIT_TIMEOUT),
        )
