"""glidemq.testing keeps up with the real API: every public method of Queue, Worker and Job
exists on TestQueue, TestWorker and TestJob with a compatible signature, or is listed as
unsupported and refuses to run with UnsupportedOptionError."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from glidemq import (
    Job,
    JobOptions,
    Queue,
    QueueEvents,
    UnsupportedOptionError,
    Worker,
    WorkerOptions,
)
from glidemq.testing import (
    UNSUPPORTED_JOB_METHODS,
    UNSUPPORTED_QUEUE_METHODS,
    UNSUPPORTED_WORKER_METHODS,
    MemoryServer,
    TestJob,
    TestQueue,
    TestQueueEvents,
    TestWorker,
)
from glidemq.testing.support import SUPPORTED_JOB_OPTIONS, SUPPORTED_WORKER_OPTIONS

PAIRS = [
    (Queue, TestQueue, UNSUPPORTED_QUEUE_METHODS),
    (Worker, TestWorker, UNSUPPORTED_WORKER_METHODS),
    (Job, TestJob, UNSUPPORTED_JOB_METHODS),
    (QueueEvents, TestQueueEvents, frozenset()),
]
IDS = ["Queue", "Worker", "Job", "QueueEvents"]

# Job methods TestJob may inherit: they only call other (overridden) methods of the job.
INHERITED_JOB_METHODS = {
    "current_fallback",  # computed from the fields opts and attempts_made
    "discard",
    "discarded",
    "is_active",
    "is_completed",
    "is_delayed",
    "is_failed",
    "is_waiting",
    "is_waiting_children",
    "moved",  # the flag the job's own move methods set
}
# Instance attributes of the real classes that have no meaning without a server.
NOT_APPLICABLE_ATTRIBUTES = {"watchdog"}


def _public(cls: type[Any]) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def _compatible(real: inspect.Signature, fake: inspect.Signature) -> list[str]:
    """Ways `fake` cannot be called like `real` (empty when compatible)."""
    problems = []
    fake_params = fake.parameters
    for name, p in real.parameters.items():
        q = fake_params.get(name)
        if q is None:
            problems.append(f"missing parameter {name!r}")
        elif q.kind != p.kind:
            problems.append(f"{name!r} is {q.kind.description}, not {p.kind.description}")
        elif q.default != p.default:
            problems.append(f"{name!r} defaults to {q.default!r}, not {p.default!r}")
    for name, q in fake_params.items():
        required = q.default is inspect.Parameter.empty
        if (
            name not in real.parameters
            and required
            and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
        ):
            problems.append(f"extra required parameter {name!r}")
    return problems


@pytest.mark.parametrize(("real", "fake", "unsupported"), PAIRS, ids=IDS)
def test_every_public_member_exists_with_a_compatible_signature(
    real: type[Any], fake: type[Any], unsupported: frozenset[str]
) -> None:
    problems: dict[str, Any] = {}
    for name in _public(real):
        if not hasattr(fake, name):
            problems[name] = "missing: implement it or list it as unsupported"
            continue
        a, b = inspect.getattr_static(real, name), inspect.getattr_static(fake, name)
        if isinstance(a, property) != isinstance(b, property):
            problems[name] = "property on one side only"
            continue
        if inspect.isclass(a):
            if a is not b:
                problems[name] = "a different class"
            continue
        member = getattr(real, name)
        if not callable(member):
            continue
        if inspect.iscoroutinefunction(member) != inspect.iscoroutinefunction(getattr(fake, name)):
            problems[name] = "async on one side only"
            continue
        found = _compatible(inspect.signature(member), inspect.signature(getattr(fake, name)))
        if found:
            problems[name] = found
    init = _compatible(inspect.signature(real.__init__), inspect.signature(fake.__init__))
    if real is not Job and init:
        problems["__init__"] = init
    assert problems == {}


@pytest.mark.parametrize(("real", "fake", "unsupported"), PAIRS, ids=IDS)
def test_unsupported_lists_name_only_real_members(
    real: type[Any], fake: type[Any], unsupported: frozenset[str]
) -> None:
    assert sorted(n for n in unsupported if not hasattr(real, n)) == []


def test_test_job_overrides_every_method_that_needs_a_server() -> None:
    needs_override = [
        n
        for n in _public(Job)
        if isinstance(inspect.getattr_static(Job, n), property)
        or inspect.isfunction(inspect.getattr_static(Job, n))
    ]
    needs_override = [
        n
        for n in needs_override
        if n not in INHERITED_JOB_METHODS
        and n not in UNSUPPORTED_JOB_METHODS
        and n not in TestJob.__dict__
    ]
    assert needs_override == []


def test_instance_attributes_match() -> None:
    server = MemoryServer()
    pairs = [
        (Queue("q"), TestQueue("q", connection=server)),
        (Worker("q", lambda job: None), TestWorker("q", lambda job: None, connection=server)),
        (QueueEvents("q"), TestQueueEvents("q", connection=server)),
    ]
    for real, fake in pairs:
        wanted = {n for n in vars(real) if not n.startswith("_")} - NOT_APPLICABLE_ATTRIBUTES
        assert sorted(n for n in wanted if not hasattr(fake, n)) == []


async def _call_unsupported(obj: Any, name: str) -> None:
    member = getattr(obj, name)
    with pytest.raises(UnsupportedOptionError) as info:
        result = member()
        if inspect.isawaitable(result):
            await result
    assert name in info.value.field


async def test_unsupported_members_refuse_with_a_typed_error() -> None:
    server = MemoryServer()
    queue: TestQueue[Any, Any] = TestQueue("q", connection=server)
    worker: TestWorker[Any, Any] = TestWorker("q", lambda job: None, connection=server)
    job = await queue.add("j", None)
    assert job is not None
    for obj, names in (
        (queue, UNSUPPORTED_QUEUE_METHODS),
        (worker, UNSUPPORTED_WORKER_METHODS),
        (job, UNSUPPORTED_JOB_METHODS),
    ):
        for name in sorted(names):
            if hasattr(type(obj), name):
                await _call_unsupported(obj, name)


def test_options_are_either_emulated_or_refused() -> None:
    # check_options refuses any non-default value of a field outside these sets; here the
    # sets must only name fields that exist.
    job_fields = set(JobOptions.__dataclass_fields__)
    worker_fields = set(WorkerOptions.__dataclass_fields__)
    assert job_fields >= SUPPORTED_JOB_OPTIONS
    assert worker_fields >= SUPPORTED_WORKER_OPTIONS


async def test_an_option_of_the_real_engine_not_emulated_is_refused() -> None:
    queue: TestQueue[Any, Any] = TestQueue("q", connection=MemoryServer())
    extra = sorted(set(JobOptions.__dataclass_fields__) - SUPPORTED_JOB_OPTIONS)
    if not extra:
        pytest.skip("every JobOptions field is emulated in memory")
    values: dict[str, Any] = {"result_ttl": 1000}  # a value each option accepts
    for f in extra:
        if JobOptions.__dataclass_fields__[f].default is False:
            values[f] = True
    tried = [f for f in extra if f in values]
    if not tried:
        pytest.skip(f"no value known to try for the unemulated options: {extra}")
    with pytest.raises(UnsupportedOptionError) as info:
        await queue.add("j", None, {tried[0]: values[tried[0]]})
    assert info.value.field == tried[0]
    assert await queue.count() == 0
    from glidemq import SandboxOptions

    with pytest.raises(UnsupportedOptionError):
        TestWorker("q", lambda job: None, sandbox=SandboxOptions())
