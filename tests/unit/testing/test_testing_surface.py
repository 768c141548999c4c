"""glidemq.testing is the real front end on an in-memory server: its classes are subclasses
of the real ones (so no method can fall behind), take the same arguments, and refuse only
what needs other processes, with a typed error."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from glidemq import (
    FlowProducer,
    Job,
    Queue,
    QueueEvents,
    SandboxOptions,
    UnsupportedOptionError,
    Worker,
    WorkerOptions,
)
from glidemq.testing import (
    UNSUPPORTED_JOB_METHODS,
    UNSUPPORTED_QUEUE_METHODS,
    UNSUPPORTED_WORKER_METHODS,
    UNSUPPORTED_WORKER_OPTIONS,
    MemoryServer,
    TestFlowProducer,
    TestJob,
    TestQueue,
    TestQueueEvents,
    TestWorker,
)

PAIRS = [
    (Queue, TestQueue),
    (Worker, TestWorker),
    (QueueEvents, TestQueueEvents),
    (FlowProducer, TestFlowProducer),
]


@pytest.mark.parametrize(("real", "fake"), PAIRS, ids=[r.__name__ for r, _ in PAIRS])
def test_each_test_class_is_the_real_class(real: type[Any], fake: type[Any]) -> None:
    assert issubclass(fake, real)
    # nothing of the real API is replaced: the test classes add, never override, methods
    overridden = sorted(
        n
        for n in vars(fake)
        if not n.startswith("_") and n in dir(real) and callable(getattr(real, n))
    )
    assert overridden == []


@pytest.mark.parametrize(("real", "fake"), PAIRS, ids=[r.__name__ for r, _ in PAIRS])
def test_constructors_take_the_real_arguments(real: type[Any], fake: type[Any]) -> None:
    a = inspect.signature(real.__init__).parameters
    b = inspect.signature(fake.__init__).parameters
    assert list(a) == list(b)
    assert [p.default for p in a.values() if p.name != "connection"] == [
        p.default for p in b.values() if p.name != "connection"
    ]


def test_test_job_is_job() -> None:
    assert TestJob is Job


def test_nothing_is_refused_but_the_sandbox() -> None:
    assert UNSUPPORTED_QUEUE_METHODS == UNSUPPORTED_WORKER_METHODS == UNSUPPORTED_JOB_METHODS
    assert frozenset() == UNSUPPORTED_QUEUE_METHODS
    assert frozenset({"sandbox"}) == UNSUPPORTED_WORKER_OPTIONS
    assert set(WorkerOptions.__dataclass_fields__) >= UNSUPPORTED_WORKER_OPTIONS


def test_the_sandbox_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOptionError) as info:
        TestWorker("q", lambda job: None, connection=MemoryServer(), sandbox=SandboxOptions())
    assert info.value.field == "sandbox"
    with pytest.raises(UnsupportedOptionError):
        TestWorker(
            "q",
            lambda job: None,
            connection=MemoryServer(),
            options=WorkerOptions(sandbox=SandboxOptions()),
        )


async def test_jobs_read_back_are_glidemq_jobs() -> None:
    server = MemoryServer()
    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    job = await queue.add("j", {"n": 1})
    assert job is not None and isinstance(job, Job)
    again = await queue.get_job(job.id)
    assert again is not None and isinstance(again, TestJob) and again.data == {"n": 1}
    await queue.close()
