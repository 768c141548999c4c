"""OpenTelemetry: producer and consumer spans in one trace, collected with the SDK's in-memory
exporter on a provider given to glidemq (`glidemq.client.otel.use_tracer_provider`), so the rest of
the test session keeps running without tracing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from glidemq import ConnectionOptions, FlowJob, FlowProducer, Job, Queue, SandboxOptions, Worker
from glidemq.client import otel
from tests.helpers import FAST, wait_for

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk not installed")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        otel.use_tracer_provider(None)
        provider.shutdown()


def _named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def _consumers(exporter: InMemorySpanExporter, queue: str, n: int) -> list[Any]:
    await wait_for(lambda: len(_named(exporter, f"process {queue}")) >= n, timeout=30)
    return _named(exporter, f"process {queue}")


async def test_one_trace_spans_the_producer_and_the_worker(
    spans: InMemorySpanExporter, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    traced: Queue[Any, Any] = Queue(queue.name, connection=conn)
    async with traced:
        job = await traced.add("greet", {"to": "ada"})
        assert job is not None
    (producer,) = _named(spans, f"add {queue.name}")
    assert producer.kind == SpanKind.PRODUCER
    assert producer.attributes["messaging.message.id"] == job.id
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.opts["traceparent"].split("-")[1] == (
        f"{producer.context.trace_id:032x}"
    )

    async def greet(j: Job[Any, Any]) -> str:
        return f"hi {j.data['to']}"

    async with Worker(queue.name, greet, connection=conn, **FAST):
        (consumer,) = await _consumers(spans, queue.name, 1)
    assert consumer.kind == SpanKind.CONSUMER
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    attrs = consumer.attributes
    assert attrs["messaging.destination.name"] == queue.name
    assert attrs["messaging.message.id"] == job.id
    assert attrs["glidemq.job.name"] == "greet"
    assert attrs["glidemq.job.attempt"] == 1
    assert attrs["glidemq.job.outcome"] == "completed"


async def test_retries_and_the_final_failure_are_span_events(
    spans: InMemorySpanExporter, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    traced: Queue[Any, Any] = Queue(queue.name, connection=conn)
    async with traced:
        job = await traced.add("flaky", 1, {"attempts": 2})
        assert job is not None

    async def always_fails(j: Job[Any, Any]) -> None:
        raise ValueError("nope")

    async with Worker(queue.name, always_fails, connection=conn, **FAST):
        first, second = sorted(
            await _consumers(spans, queue.name, 2),
            key=lambda s: s.attributes["glidemq.job.attempt"],
        )
    (producer,) = _named(spans, f"add {queue.name}")
    assert {first.context.trace_id, second.context.trace_id} == {producer.context.trace_id}
    assert (first.attributes["glidemq.job.attempt"], second.attributes["glidemq.job.attempt"]) == (
        1,
        2,
    )
    assert first.attributes["glidemq.job.outcome"] == "retry"
    assert [e.name for e in first.events] == ["exception", "retry"]
    assert second.attributes["glidemq.job.outcome"] == "failed"
    assert [e.name for e in second.events] == ["exception", "failed"]
    assert second.events[1].attributes["glidemq.failure.reason"] == "nope"
    assert second.status.status_code == StatusCode.ERROR


async def test_add_bulk_is_one_producer_span_for_every_job(
    spans: InMemorySpanExporter, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    traced: Queue[Any, Any] = Queue(queue.name, connection=conn)
    async with traced:
        await traced.add_bulk([("n", i) for i in range(5)])
    (producer,) = _named(spans, f"add_bulk {queue.name}")
    assert producer.attributes["messaging.batch.message_count"] == 5

    async def noop(j: Job[Any, Any]) -> None:
        return None

    async with Worker(queue.name, noop, connection=conn, concurrency=5, **FAST):
        consumers = await _consumers(spans, queue.name, 5)
    assert {c.parent.span_id for c in consumers} == {producer.context.span_id}


async def test_a_flow_is_one_trace_for_the_parent_and_its_children(
    spans: InMemorySpanExporter, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with FlowProducer(connection=conn) as flows:
        await flows.add(
            FlowJob(
                name="parent",
                queue_name=queue.name,
                children=[FlowJob(name="child", queue_name=queue.name, data=i) for i in (1, 2)],
            )
        )
    (producer,) = _named(spans, f"add_flow {queue.name}")

    async def noop(j: Job[Any, Any]) -> str:
        return j.name

    async with Worker(queue.name, noop, connection=conn, concurrency=2, **FAST):
        consumers = await _consumers(spans, queue.name, 3)
    names = sorted(c.attributes["glidemq.job.name"] for c in consumers)
    assert names == ["child", "child", "parent"]
    assert {c.context.trace_id for c in consumers} == {producer.context.trace_id}


async def test_a_sandboxed_run_is_the_consumer_span(
    spans: InMemorySpanExporter, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    traced: Queue[Any, Any] = Queue(queue.name, connection=conn)
    async with traced:
        job = await traced.add("echo", {"x": 1})
        assert job is not None
    async with Worker(
        queue.name,
        "tests.fixtures.sandbox_procs:echo",
        connection=conn,
        sandbox=SandboxOptions(),
        stalled_interval=60_000,
        **FAST,
    ):
        (consumer,) = await _consumers(spans, queue.name, 1)
    (producer,) = _named(spans, f"add {queue.name}")
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.attributes["glidemq.sandbox"] is True
    assert consumer.attributes["glidemq.job.outcome"] == "completed"


async def test_without_a_provider_nothing_is_traced_or_stored(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    assert otel.job_tracing() is None  # no global provider is set in the test session
    job = await queue.add("plain", 1)
    assert job is not None
    stored = await queue.get_job(job.id)
    assert stored is not None and "traceparent" not in stored.opts
    worker: Worker[Any, Any] = Worker(queue.name, lambda j: None, connection=conn)
    assert worker._tracing is None and queue._tracing is None


def test_the_core_does_not_import_opentelemetry_when_it_is_absent() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # as if it were not installed
        "import glidemq\n"
        "from glidemq.client import otel\n"
        "q = glidemq.Queue('q'); w = glidemq.Worker('q', lambda j: None)\n"
        "assert q._tracing is None and w._tracing is None and otel.job_tracing() is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.')]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


async def test_a_tracing_worker_records_tries_and_durations(
    spans: InMemorySpanExporter, queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    otel.use_meter_provider(meters)
    try:
        await queue.add_bulk([("ok", 1), ("ok", 2), ("bad", 3, {"attempts": 1})])

        async def proc(j: Job[Any, Any]) -> None:
            if j.name == "bad":
                raise ValueError("bad")

        async with Worker(queue.name, proc, connection=conn, concurrency=3, **FAST):
            await _consumers(spans, queue.name, 3)
    finally:
        otel.use_meter_provider(None)
    data = reader.get_metrics_data()
    metrics = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    tries = {
        p.attributes["glidemq.job.outcome"]: p.value
        for p in metrics["glidemq.job.tries"].data.data_points
    }
    assert tries == {"completed": 2, "failed": 1}
    (duration,) = [
        p
        for p in metrics["glidemq.job.duration"].data.data_points
        if p.attributes["glidemq.job.outcome"] == "completed"
    ]
    assert duration.count == 2 and duration.sum >= 0
    meters.shutdown()
