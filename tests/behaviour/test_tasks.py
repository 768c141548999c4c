"""Task handles on every backend: the job name routes to the function, the arguments are
checked and decoded by the type hints before the run, and current_job() is the job."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest

import glidemq
from glidemq import GlideMQError, TaskArgumentError, ValidationError
from tests.behaviour.conftest import Backend
from tests.helpers import wait_state


@dataclass
class Address:
    street: str
    zip: str


class Line(TypedDict):
    sku: str
    qty: int


async def test_jobs_route_by_name_to_async_and_sync_tasks(backend: Backend) -> None:
    threads: list[str] = []

    @glidemq.task(backend.name)
    async def add(a: int, b: int = 10) -> int:
        return a + b

    @glidemq.task(backend.name, name="ship")
    def ship_order(to: Address, lines: list[Line]) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        assert isinstance(to, Address)  # decoded into the hinted class, not a dict
        return {"zip": to.zip, "items": sum(line["qty"] for line in lines)}

    first = await backend.queue.add("add", add.payload(1))
    second = await backend.queue.add(
        "ship", ship_order.payload(Address("Main St", "9000"), [{"sku": "a", "qty": 2}])
    )
    assert first is not None and second is not None
    async with backend.worker(glidemq.task_processor(add, ship_order)):
        await wait_state(backend.queue, first.id, "completed")
        await wait_state(backend.queue, second.id, "completed")
    assert await backend.queue.get_result(first.id) == 11
    assert await backend.queue.get_result(second.id) == {"zip": "9000", "items": 2}
    assert threads and threads[0] != threading.main_thread().name  # a sync task runs on a thread


async def test_a_sync_task_calls_the_job_methods_without_awaiting(backend: Backend) -> None:
    @glidemq.task(backend.name)
    def long_one(steps: int) -> int:
        job = glidemq.current_job()
        for step in range(1, steps + 1):
            job.update_progress(step * 25)  # returns when stored: no await in sync code
        job.log("done")
        return job.attempts_made + 1

    job = await backend.queue.add("long_one", long_one.payload(4))
    assert job is not None
    async with backend.worker(glidemq.task_processor(long_one)):
        await wait_state(backend.queue, job.id, "completed")
    stored = await backend.queue.get_job(job.id)
    assert stored is not None and stored.progress == 100 and stored.returnvalue == 1
    logs, total = await backend.queue.get_job_logs(job.id)
    assert total == 1 and logs == ["done"]


async def test_arguments_that_do_not_fit_fail_at_once_naming_the_argument(
    backend: Backend,
) -> None:
    runs: list[int] = []

    @glidemq.task(backend.name, attempts=5)
    async def charge(amount: int, currency: str = "EUR") -> None:
        runs.append(amount)

    bad_type = await backend.queue.add("charge", {"amount": "ten"})
    missing = await backend.queue.add("charge", {"currency": "USD"})
    extra = await backend.queue.add("charge", {"amount": 1, "colour": "red"})
    not_a_dict = await backend.queue.add("charge", [1, 2])
    unknown = await backend.queue.add("refund", {"amount": 1})
    jobs = [bad_type, missing, extra, not_a_dict, unknown]
    async with backend.worker(glidemq.task_processor(charge)):
        for job in jobs:
            assert job is not None
            await wait_state(backend.queue, job.id, "failed")
    reasons = []
    for job in jobs:
        assert job is not None
        stored = await backend.queue.get_job(job.id)
        assert stored is not None
        assert stored.attempts_made == 1  # unrecoverable: no retry could mend the arguments
        reasons.append(stored.failed_reason or "")
    assert "charge.amount" in reasons[0] and "expected int" in reasons[0]
    assert "charge.amount" in reasons[1] and "missing" in reasons[1]
    assert "charge.colour" in reasons[2]
    assert "object of arguments" in reasons[3]
    assert "no task named 'refund'" in reasons[4] and "charge" in reasons[4]
    assert runs == []


async def test_current_job_is_the_running_job_in_async_and_sync_tasks(backend: Backend) -> None:
    seen: dict[str, str] = {}

    @glidemq.task(backend.name)
    async def report() -> None:
        job = glidemq.current_job()
        await job.update_progress(40)
        seen["async"] = job.id

    @glidemq.task(backend.name)
    def report_sync() -> None:
        seen["sync"] = glidemq.current_job().id

    a = await backend.queue.add("report", report.payload())
    s = await backend.queue.add("report_sync", report_sync.payload())
    assert a is not None and s is not None
    async with backend.worker(glidemq.task_processor(report, report_sync)):
        await wait_state(backend.queue, a.id, "completed")
        await wait_state(backend.queue, s.id, "completed")
    assert seen == {"async": a.id, "sync": s.id}
    stored = await backend.queue.get_job(a.id)
    assert stored is not None and stored.progress == 40
    with pytest.raises(GlideMQError, match="only known inside a task"):
        glidemq.current_job()


async def test_a_task_raising_retry_or_unrecoverable_behaves_as_a_processor(
    backend: Backend,
) -> None:
    @glidemq.task(backend.name, attempts=3)
    async def flaky() -> None:
        raise glidemq.UnrecoverableError("card declined")

    job = await backend.queue.add("flaky", flaky.payload(), flaky.options)
    assert job is not None
    async with backend.worker(glidemq.task_processor(flaky)):
        await wait_state(backend.queue, job.id, "failed")
    stored = await backend.queue.get_job(job.id)
    assert stored is not None and stored.attempts_made == 1
    assert stored.failed_reason == "card declined"


def test_payload_checks_arguments_on_add() -> None:
    @glidemq.task("payload-checks")
    def send(to: str, cc: list[str] | None = None, *, urgent: bool = False) -> None: ...

    assert send.payload("a@b", urgent=True) == {"to": "a@b", "urgent": True}
    with pytest.raises(TaskArgumentError) as info:
        send.payload(to=3)
    assert info.value.field == "send.to"
    with pytest.raises(TaskArgumentError) as info:
        send.payload("a@b", cc=["x", 2])
    assert info.value.field == "send.cc[1]"
    with pytest.raises(TaskArgumentError) as info:
        send.payload()
    assert info.value.field == "send.to"
    with pytest.raises(TaskArgumentError):
        send.payload("a@b", bcc=["x"])  # type: ignore[call-arg]
    assert isinstance(info.value, ValidationError)
    assert send("x") is None  # calling the handle runs the function here


def test_the_decorator_rejects_bad_declarations() -> None:
    with pytest.raises(ValidationError, match="did you mean 'attempts'"):
        glidemq.task("q", atempts=3)
    with pytest.raises(ValidationError):
        glidemq.task("bad{name}")
    with pytest.raises(ValidationError, match="cron or every"):
        glidemq.task("q", cron="* * * * *", every=1000)
    with pytest.raises(ValidationError):
        glidemq.task("q", cron="not a cron")(lambda: None)
    with pytest.raises(TaskArgumentError):

        @glidemq.task("q", every=1000, schedule_args={"n": "x"})
        def tick(n: int) -> None: ...

    with pytest.raises(ValidationError, match="share the name"):

        @glidemq.task("q", name="same")
        def first() -> None: ...

        @glidemq.task("q", name="same")
        def second() -> None: ...

        glidemq.task_processor(first, second)


def test_with_options_merges_and_checks_job_options() -> None:
    @glidemq.task("q", attempts=3, priority=2)
    def work() -> None: ...

    later = work.with_options(delay=60_000)
    assert (later.options.attempts, later.options.priority, later.options.delay) == (3, 2, 60_000)
    assert work.options.delay == 0  # the original handle is unchanged
    with pytest.raises(ValidationError):
        work.with_options(dealy=1)
