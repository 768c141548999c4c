"""Durable workflows on every backend: steps run once and are given back on a rerun, sleeps
and waits hold no worker, events sent early are kept, retries of a step stay with the step,
a changed history is refused, children and recorded values survive replays, and the caps
refuse with clear errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import glidemq
from glidemq import (
    EventTimeoutError,
    GlideMQError,
    JobStateError,
    StepFailedError,
    WorkflowContext,
)
from tests.behaviour.conftest import Backend
from tests.helpers import wait_for, wait_state

HOUR = 3600


async def start(backend: Backend, wf: Any, *args: Any, queue: Any = None) -> str:
    """Add a run of `wf` with the backend's own queue (the handle's queue stays unused)."""
    job = await (queue or backend.queue).add(wf.name, wf.payload(*args), wf.options)
    assert job is not None
    return str(job.id)


async def finished(backend: Backend, job_id: str, state: str = "completed") -> Any:
    return await wait_state(backend.queue, job_id, state, timeout=20)


async def test_steps_run_once_and_a_rerun_gives_back_their_results(backend: Backend) -> None:
    calls: list[str] = []
    tries: list[int] = []

    def charge(order: str) -> dict[str, Any]:
        calls.append(f"charge {order}")
        return {"charged": order, "cents": 1250}

    async def label(order: str, charge: dict[str, Any]) -> str:
        calls.append(f"label {order}")
        return f"{order}:{charge['cents']}"

    @glidemq.workflow(backend.name, attempts=2)
    async def fulfil(ctx: WorkflowContext, order: str) -> dict[str, Any]:
        charged = await ctx.step("charge", charge, order)
        tries.append(ctx.job.attempts_made)
        if len(tries) == 1:
            raise RuntimeError("crash between steps")  # the workflow's own retry replays
        return {"charge": charged, "label": await ctx.step("label", label, order, charged)}

    job_id = await start(backend, fulfil, "o-1")
    async with backend.worker(glidemq.task_processor(fulfil)):
        job = await finished(backend, job_id)
    assert job.returnvalue == {"charge": {"charged": "o-1", "cents": 1250}, "label": "o-1:1250"}
    assert calls == ["charge o-1", "label o-1"]  # charge once, although the body ran twice
    assert tries == [0, 1]
    assert [(s.position, s.name, s.kind, s.status, s.attempts) for s in job.steps] == [
        (1, "charge", "step", "done", 1),
        (2, "label", "step", "done", 1),
    ]
    first = job.steps[0]
    assert first.result == {"charged": "o-1", "cents": 1250}
    assert first.started_at is not None and first.finished_at is not None


async def test_sleeping_workflows_hold_no_worker_slot(backend: Backend) -> None:
    @glidemq.task(backend.name)
    async def ping() -> str:
        return "pong"

    @glidemq.workflow(backend.name)
    async def nap(ctx: WorkflowContext, n: int) -> int:
        await ctx.step("before", lambda: n)
        await ctx.sleep(HOUR)
        return n

    ids = [await start(backend, nap, n) for n in range(3)]
    async with backend.worker(glidemq.task_processor(nap, ping), concurrency=1) as worker:
        for job_id in ids:  # one slot, three sleepers: each left it when it fell asleep
            await wait_state(backend.queue, job_id, "delayed")
        plain = await start(backend, ping)
        await wait_state(backend.queue, plain, "completed")
        assert worker.active_count == 0
    job = await backend.queue.get_job(ids[0])
    assert job is not None and [s.status for s in job.steps] == ["done", "sleeping"]
    assert job.steps[1].until is not None and job.steps[1].until >= backend.now_ms() + 3_500_000


async def test_a_sleep_resumes_after_its_time(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def later(ctx: WorkflowContext) -> str:
        await ctx.sleep(0.3)
        return "woke"

    job_id = await start(backend, later)
    async with backend.worker(glidemq.task_processor(later)):
        await wait_state(backend.queue, job_id, "delayed")
        await backend.elapse(400)
        job = await finished(backend, job_id)
    assert job.returnvalue == "woke"
    assert [(s.kind, s.status) for s in job.steps] == [("sleep", "done")]


async def test_events_sent_before_the_wait_are_kept_and_others_wait(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def order(ctx: WorkflowContext) -> list[Any]:
        paid = await ctx.wait_for_event("paid")
        shipped = await ctx.wait_for_event("shipped")
        return [paid, shipped]

    job_id = await start(backend, order)
    # sent before any worker ran it: kept in its mailbox, not refused
    assert await backend.queue.signal(job_id, "paid", {"eur": 5}) == "waiting"
    async with backend.worker(glidemq.task_processor(order)):
        await wait_state(backend.queue, job_id, "suspended")  # waits for shipped
        suspended = await backend.queue.get_job(job_id)
        assert suspended is not None
        assert [(s.name, s.status) for s in suspended.steps] == [
            ("paid", "done"),
            ("shipped", "waiting"),
        ]
        # another event's name does not wake it; it is kept for later
        assert await backend.queue.signal(job_id, "refund", None) == "suspended"
        assert await backend.queue.signal(job_id, "shipped", "dhl") == "waiting"
        job = await finished(backend, job_id)
    assert job.returnvalue == [{"eur": 5}, "dhl"]
    with pytest.raises(JobStateError, match="finished"):
        await backend.queue.signal(job_id, "shipped", "late")


async def test_a_plain_job_still_refuses_a_signal_when_not_suspended(backend: Backend) -> None:
    job = await backend.queue.add("plain", {})
    assert job is not None
    with pytest.raises(JobStateError, match="not suspended"):
        await backend.queue.signal(job.id, "go")


async def test_a_wait_that_times_out_raises_in_the_workflow(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def impatient(ctx: WorkflowContext) -> str:
        try:
            await ctx.wait_for_event("reply", timeout=0.3)
        except EventTimeoutError as exc:
            return f"gave up on {exc.event}"
        return "answered"

    job_id = await start(backend, impatient)
    async with backend.worker(glidemq.task_processor(impatient)):
        await wait_state(backend.queue, job_id, "suspended")
        await backend.elapse(400)
        job = await finished(backend, job_id)
    assert job.returnvalue == "gave up on reply"
    assert [(s.kind, s.status) for s in job.steps] == [("event", "timeout")]


async def test_a_step_retries_alone_then_fails_the_workflow_naming_it(backend: Backend) -> None:
    flaky: list[int] = []
    broken: list[int] = []

    def sometimes() -> str:
        flaky.append(1)
        if len(flaky) < 3:
            raise ConnectionError(f"try {len(flaky)}")
        return "ok"

    def never() -> None:
        broken.append(1)
        raise ValueError("card declined")

    @glidemq.workflow(backend.name, attempts=5)
    async def pay(ctx: WorkflowContext) -> str:
        first = await ctx.step("flaky", sometimes, attempts=3, backoff=0)
        await ctx.step("broken", never, attempts=2, backoff=0)
        return first

    job_id = await start(backend, pay)
    async with backend.worker(glidemq.task_processor(pay)):
        job = await finished(backend, job_id, "failed")
    assert len(flaky) == 3 and len(broken) == 2
    assert job.failed_reason == "step 'broken' failed after 2 attempts: card declined"
    assert job.attempts_made == 1  # the step's attempts are its own; the failure is final
    assert [(s.name, s.status, s.attempts, s.error) for s in job.steps] == [
        ("flaky", "done", 3, None),
        ("broken", "failed", 2, "card declined"),
    ]

    # retrying the failed workflow runs its failed last step again, and only that
    broken.clear()
    async with backend.worker(glidemq.task_processor(pay)):
        await (await backend.queue.get_job(job_id)).retry()
        await finished(backend, job_id, "failed")
    assert len(flaky) == 3 and len(broken) == 2


async def test_a_caught_step_failure_lets_the_workflow_compensate(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def careful(ctx: WorkflowContext) -> str:
        try:
            await ctx.step("risky", lambda: 1 / 0)
        except StepFailedError as exc:
            failed = exc.step
            return await ctx.step("undo", lambda: f"undone {failed}")
        return "fine"

    job_id = await start(backend, careful)
    async with backend.worker(glidemq.task_processor(careful)):
        job = await finished(backend, job_id)
    assert job.returnvalue == "undone risky"


async def test_a_changed_history_fails_with_non_determinism(backend: Backend) -> None:
    @glidemq.workflow(backend.name, name="evolving")
    async def v1(ctx: WorkflowContext) -> str:
        await ctx.step("a", lambda: "a")
        await ctx.sleep(HOUR)
        return "v1"

    @glidemq.workflow(backend.name, name="evolving")
    async def v2(ctx: WorkflowContext) -> str:
        await ctx.step("b", lambda: "b")  # position 1 now holds another step
        return "v2"

    job_id = await start(backend, v1)
    async with backend.worker(glidemq.task_processor(v1)):
        await wait_state(backend.queue, job_id, "delayed")
    async with backend.worker(glidemq.task_processor(v2)):
        await (await backend.queue.get_job(job_id)).promote()
        job = await finished(backend, job_id, "failed")
    assert job.failed_reason is not None
    assert "position 1" in job.failed_reason
    assert "step 'a'" in job.failed_reason and "step 'b'" in job.failed_reason
    assert job.attempts_made == 1


async def test_a_child_runs_as_a_job_and_its_result_comes_back(backend: Backend) -> None:
    runs: list[int] = []

    @glidemq.task(backend.name)
    async def square(n: int) -> int:
        runs.append(n)
        if n < 0:
            raise ValueError("negative")
        return n * n

    @glidemq.workflow(backend.name)
    async def parent(ctx: WorkflowContext, n: int) -> list[Any]:
        got = await ctx.child(square, n)
        try:
            await ctx.child(square, -1)
        except StepFailedError as exc:
            return [got, exc.step, exc.reason]
        return [got]

    job_id = await start(backend, parent, 7)
    async with backend.worker(glidemq.task_processor(parent, square), concurrency=1):
        job = await finished(backend, job_id)
    assert job.returnvalue == [49, "square", "negative"]
    assert runs == [7, -1]
    kinds = [(s.kind, s.name, s.status, s.result) for s in job.steps]
    assert kinds == [("child", "square", "done", 49), ("child", "square", "failed", None)]
    assert job.steps[0].child is not None and job.steps[0].child.startswith(backend.name + ":")


async def test_now_and_random_are_the_same_on_every_replay(backend: Backend) -> None:
    seen: list[tuple[Any, float]] = []

    @glidemq.workflow(backend.name, attempts=2)
    async def draw(ctx: WorkflowContext) -> list[Any]:
        when, luck = await ctx.now(), await ctx.random()
        seen.append((when, luck))
        if len(seen) == 1:
            raise RuntimeError("once more")
        return [when.isoformat(), luck]

    job_id = await start(backend, draw)
    async with backend.worker(glidemq.task_processor(draw)):
        await finished(backend, job_id)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert 0 <= seen[0][1] < 1


async def test_a_step_result_over_the_cap_fails_the_workflow_clearly(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def huge(ctx: WorkflowContext) -> None:
        await ctx.step("big", lambda: "x" * 1_100_000)

    job_id = await start(backend, huge)
    async with backend.worker(glidemq.task_processor(huge)):
        job = await finished(backend, job_id, "failed")
    assert job.failed_reason is not None and "1048576 bytes a result" in job.failed_reason
    assert [(s.name, s.status) for s in job.steps] == [("big", "failed")]


async def test_a_history_is_capped_at_a_thousand_entries(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def endless(ctx: WorkflowContext) -> None:
        for i in range(1001):
            await ctx.step(f"s{i}", lambda: None)

    job_id = await start(backend, endless)
    async with backend.worker(glidemq.task_processor(endless)):
        job = await finished(backend, job_id, "failed")
    assert job.failed_reason is not None and "1000 entries" in job.failed_reason
    assert len(job.steps) == 1000


async def test_a_full_mailbox_refuses_the_next_event(backend: Backend) -> None:
    @glidemq.workflow(backend.name)
    async def deaf(ctx: WorkflowContext) -> None:
        await ctx.sleep(HOUR)

    job_id = await start(backend, deaf)
    sent = await asyncio.gather(*(backend.queue.signal(job_id, "e", i) for i in range(100)))
    assert set(sent) == {"waiting"}
    with pytest.raises(JobStateError, match="mailbox is full"):
        await backend.queue.signal(job_id, "e", 100)


async def test_workflows_are_found_and_checked_like_tasks(backend: Backend) -> None:
    with pytest.raises(GlideMQError, match="async"):

        @glidemq.workflow(backend.name)
        def sync_one(ctx: WorkflowContext) -> None: ...

    @glidemq.workflow(backend.name)
    async def typed(ctx: WorkflowContext, n: int) -> int:
        return n

    with pytest.raises(glidemq.TaskArgumentError, match=r"typed\.n"):
        typed.payload("not a number")
    with pytest.raises(TypeError, match="start"):
        typed(1)
    assert typed.options.workflow is True


async def test_a_workflow_added_with_a_delay_does_not_wait_it_again_after_a_child(
    backend: Backend,
) -> None:
    @glidemq.task(backend.name)
    async def one() -> int:
        return 1

    @glidemq.workflow(backend.name)
    async def later(ctx: WorkflowContext) -> int:
        return await ctx.child(one) + 1

    seen: list[tuple[str, str | None, str | None]] = []
    reader = backend.queue_events()
    for name in ("delayed", "waiting"):
        reader.on(name, lambda ev, n=name: seen.append((n, ev.job_id, ev.fields.get("reason"))))
    await reader.start()
    job = await backend.queue.add(later.name, later.payload(), {"delay": 300})
    assert job is not None
    async with backend.worker(glidemq.task_processor(later, one)):
        await wait_state(backend.queue, job.id, "delayed")
        await backend.elapse(400)
        done = await finished(backend, job.id)
        await wait_for(lambda: ("waiting", job.id, "children") in seen)
    assert done.returnvalue == 2
    # its child's end made it runnable at once: the delay it was added with is not repeated
    assert ("delayed", job.id, "children") not in seen
