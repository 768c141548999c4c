"""OpenTelemetry through glidemq-run: a job added by this process (in-memory exporter) and
processed by a glidemq-run worker process (whose application module sets up a provider)
is one trace, with and without --sandbox."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glidemq import Queue
from glidemq.client import otel
from tests.helpers import wait_for

from .conftest import Launcher

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk not installed")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)


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


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("sandbox", [False, True], ids=["workers", "sandbox"])
async def test_one_trace_from_the_producer_to_a_glidemq_run_worker(
    run_cli: Launcher,
    spans: InMemorySpanExporter,
    valkey_server: Any,
    queue_name: str,
    tmp_path: Path,
    sandbox: bool,
) -> None:
    out = tmp_path / "spans.jsonl"
    cli = run_cli(
        "tests.fixtures.otel_app:work",
        *("--queue", queue_name, "--procs", 1, "--url", valkey_server.url),
        *(["--sandbox"] if sandbox else []),
        env={"GLIDEMQ_TEST_SPANS": str(out)},
    )
    await cli.wait_workers(1)
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        job = await queue.add("traced", {"n": 1})
        assert job is not None
        (producer,) = [s for s in spans.get_finished_spans() if s.name == f"add {queue_name}"]
        name = f"process {queue_name}"
        await wait_for(lambda: [s for s in _read(out) if s["name"] == name], timeout=60)
        (consumer,) = [s for s in _read(out) if s["name"] == name]
        assert consumer["trace_id"] == f"{producer.context.trace_id:032x}"
        assert consumer["parent_id"] == f"{producer.context.span_id:016x}"
        assert consumer["attributes"]["messaging.message.id"] == job.id
        assert consumer["attributes"]["glidemq.job.outcome"] == "completed"
        assert consumer["attributes"].get("glidemq.sandbox", False) is sandbox
        assert consumer["pid"] in cli.worker_pids()  # the worker process made the span
        runs = [s for s in _read(out) if s["name"] == f"run {queue_name}"]
        if sandbox:  # the sandbox child's run of the job is a span of the same trace
            await wait_for(lambda: [s for s in _read(out) if s["name"] == f"run {queue_name}"])
            (run,) = [s for s in _read(out) if s["name"] == f"run {queue_name}"]
            assert run["trace_id"] == consumer["trace_id"]
            assert run["parent_id"] == f"{producer.context.span_id:016x}"
            assert run["attributes"]["glidemq.sandbox"] is True
            assert run["pid"] not in cli.worker_pids() and run["pid"] != cli.pid
        else:
            assert runs == []
        await queue.obliterate(force=True)
    cli.send(signal.SIGTERM)
    assert await cli.wait_exit(30) == 0
