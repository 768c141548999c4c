"""Micro-benchmarks of glidemq's hot paths (pytest-benchmark).

    make bench-micro                       # run and save
    make bench-micro ARGS=--benchmark-compare   # compare with the last saved run
Not part of `make test`: timings are measured here, never asserted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from glidemq import JobOptions, Queue, Worker
from glidemq.client.context import QueueContext
from glidemq.encoding.serialize import decode_data, encode_data
from glidemq.job.job import Job
from glidemq.keys import QueueKeys
from glidemq.server.valkey import EmbeddedValkey
from glidemq.types import wire_opts

FIELDS = {
    b"id": b"12345", b"name": b"email", b"data": b'{"to":"a@example.com","n":1}',
    b"opts": b'{"attempts":3}', b"timestamp": b"1763800000000", b"attemptsMade": b"0",
    b"delay": b"0", b"priority": b"0", b"maxAttempts": b"3", b"state": b"active",
    b"processedOn": b"1763800000001", b"sid": b"1763800000000-0",
}  # fmt: skip


def test_key_building(benchmark: Any) -> None:
    benchmark(lambda: QueueKeys("emails").job("12345"))


def test_encode_job_arguments(benchmark: Any) -> None:
    opts = JobOptions(attempts=3)

    def encode() -> tuple[bytes, bytes]:
        return encode_data({"to": "a@example.com", "n": 1}), wire_opts(opts)

    benchmark(encode)


def test_decode_job(benchmark: Any) -> None:
    ctx = QueueContext(None, QueueKeys("emails"))  # type: ignore[arg-type]
    benchmark(lambda: Job(ctx, FIELDS))


def test_decode_payload(benchmark: Any) -> None:
    raw = orjson.dumps({"to": "a@example.com", "items": list(range(50))})
    benchmark(lambda: decode_data(raw))


def _run(coro: Any) -> Any:
    return asyncio.get_event_loop().run_until_complete(coro)


@pytest.fixture(scope="module")
def loop() -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()


def test_one_fcall_round_trip(benchmark: Any, valkey: EmbeddedValkey, loop: Any) -> None:
    queue: Queue[Any, Any] = Queue("micro-fcall", connection=valkey.url)
    ctx = loop.run_until_complete(queue._context())
    keys = [queue.keys.stream, queue.keys.scheduled]

    def once() -> Any:
        return loop.run_until_complete(ctx.fcall("glidemq_getCounts", keys, []))

    benchmark(once)
    loop.run_until_complete(queue.close())


def test_worker_per_job_path(benchmark: Any, valkey: EmbeddedValkey, loop: Any) -> None:
    """1,000 pre-filled no-op jobs through a Worker at concurrency 100, per round."""
    queue: Queue[Any, Any] = Queue("micro-worker", connection=valkey.url)

    async def noop(job: Job[Any, None]) -> None:
        return None

    async def round_() -> None:
        await queue.add_bulk([("n", i, {"remove_on_complete": True}) for i in range(1000)])
        worker: Worker[Any, None] = Worker(
            "micro-worker", noop, connection=valkey.url, concurrency=100
        )
        await worker.start()
        while worker.completed_count < 1000:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        await worker.close()

    benchmark.pedantic(lambda: loop.run_until_complete(round_()), rounds=5, iterations=1)
    loop.run_until_complete(queue.close())
