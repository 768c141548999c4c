"""OpenTelemetry tracing, bring your own tracer provider (docs/OBSERVABILITY.md).

`job_tracing()` is asked once, when a Queue, Worker or FlowProducer is built: it returns None
when the `opentelemetry` package is absent or no tracer provider has been set, and then
nothing here runs again for that object. Otherwise producers open a span per add (one per
`add_bulk` / flow) and stamp its W3C `traceparent` into the job's `opts` JSON; the worker
opens a consumer span per processed try, as a child of that context, so the producer and
every try of the job share one trace.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "TRACEPARENT",
    "JobTracing",
    "job_tracing",
    "stamp_opts",
    "use_meter_provider",
    "use_tracer_provider",
]

TRACEPARENT = "traceparent"
"""The key of the job's `opts` JSON that carries the producer's trace context."""

SYSTEM = "glidemq"
_NO_STATUS = ("stale", "missing", "error")
_provider: Any = None  # set by use_tracer_provider; None: OpenTelemetry's global provider
_meter_provider: Any = None  # set by use_meter_provider; None: the global one


def use_meter_provider(provider: Any) -> None:
    """Record glidemq's job metrics with this `MeterProvider` instead of the global one (None
    goes back to it). Metrics are recorded by workers that trace (see `job_tracing`)."""
    global _meter_provider
    _meter_provider = provider


def use_tracer_provider(provider: Any) -> None:
    """Trace with this `TracerProvider` instead of OpenTelemetry's global one (None goes
    back to the global one). Applies to Queues, Workers and FlowProducers built afterwards."""
    global _provider
    _provider = provider


def stamp_opts(opts: bytes, traceparent: str | None) -> bytes:
    """The job's `opts` JSON with `traceparent` added (as its last key)."""
    if not traceparent:
        return opts
    entry = b'"' + TRACEPARENT.encode() + b'":"' + traceparent.encode() + b'"'
    if opts.strip() in (b"", b"{}"):
        return b"{" + entry + b"}"
    return opts.rstrip()[:-1] + b"," + entry + b"}"


class JobTracing:
    """The spans of one Queue, Worker or FlowProducer, on the global tracer provider."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()
        meters = _meter_provider if _meter_provider is not None else metrics.get_meter_provider()
        meter = meters.get_meter("glidemq", __version__)
        self._tries = meter.create_counter(
            "glidemq.job.tries", unit="{try}", description="Tries of jobs processed, by outcome"
        )
        self._duration = meter.create_histogram(
            "glidemq.job.duration", unit="s", description="Time a try of a job took"
        )

    # -- producers ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def producer(self, operation: str, queue: str, **attributes: Any) -> Iterator[Span]:
        """A producer span `"{operation} {queue}"` made current for the `with` block."""
        attrs = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": operation,
            "messaging.destination.name": queue,
            **attributes,
        }
        with self._tracer.start_as_current_span(
            f"{operation} {queue}", kind=self._trace.SpanKind.PRODUCER, attributes=attrs
        ) as span:
            yield span

    def traceparent(self) -> str | None:
        """The current context as a W3C `traceparent` value."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier.get(TRACEPARENT)

    # -- consumers ---------------------------------------------------------------------------

    async def process(
        self,
        job: Any,
        run: Callable[[Any], Awaitable[str]],
        *,
        sandbox: bool = False,
    ) -> str:
        """Run one try of `job` (`run(job)` returns its outcome) inside a consumer span that
        is a child of the producer's context carried in the job."""
        opts = job.opts
        tp = opts.get(TRACEPARENT) if isinstance(opts, dict) else None
        parent = self._propagator.extract({TRACEPARENT: tp}) if isinstance(tp, str) else None
        attrs = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": job.queue_name,
            "messaging.message.id": job.id,
            "glidemq.job.name": job.name,
            "glidemq.job.attempt": job.attempts_made + 1,
        }
        if sandbox:
            attrs["glidemq.sandbox"] = True
        with self._tracer.start_as_current_span(
            f"process {job.queue_name}",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            attributes=attrs,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            started = time.perf_counter()
            outcome = await run(job)
            span.set_attribute("glidemq.job.outcome", outcome)
            if outcome == "failed":
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
            labels = {"messaging.destination.name": job.queue_name, "glidemq.job.outcome": outcome}
            self._tries.add(1, labels)
            self._duration.record(time.perf_counter() - started, labels)
            return outcome

    async def child_run(self, job: Any, run: Awaitable[None]) -> None:
        """A sandbox child's run of one job (`run`), as a span of the job's trace; spans the
        processor opens in the child nest under it."""
        opts = job.opts
        tp = opts.get(TRACEPARENT) if isinstance(opts, dict) else None
        parent = self._propagator.extract({TRACEPARENT: tp}) if isinstance(tp, str) else None
        attrs = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.queue_name,
            "messaging.message.id": job.id,
            "glidemq.job.name": job.name,
            "glidemq.job.attempt": job.attempts_made + 1,
            "glidemq.sandbox": True,
        }
        with self._tracer.start_as_current_span(
            f"run {job.queue_name}", context=parent, attributes=attrs
        ):
            await run

    def failed(self, error: BaseException, status: str, reason: str, delay: int) -> None:
        """Record a failed try on the current (consumer) span: a `retry` event when the job
        will run again, a `failed` event when it failed for good."""
        if status in _NO_STATUS:
            return
        span = self._trace.get_current_span()
        span.record_exception(error)
        name = "retry" if status == "retry" else "failed"
        attrs: dict[str, Any] = {"glidemq.failure.reason": reason[:1000]}
        if status == "retry":
            attrs["glidemq.retry.delay_ms"] = delay
        span.add_event(name, attrs)


def job_tracing() -> JobTracing | None:
    """Tracing for a new Queue / Worker / FlowProducer, or None (the usual case) when
    OpenTelemetry is not installed or no tracer provider is set: then it costs nothing."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # nobody set a provider: every span would be dropped
    return JobTracing(provider.get_tracer("glidemq", __version__))
