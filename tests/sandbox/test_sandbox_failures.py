"""What fails in a child fails the job as it would in-process: errors with their type,
message and the child's traceback; crashes with the exit code or signal; a processor that
cannot be imported without a respawn storm."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import pytest

from glidemq import ConnectionOptions, JobOptions, Queue, Worker
from glidemq.sandbox import SandboxOptions
from tests.helpers import wait_for

from .conftest import finished, sandboxed


async def test_error_keeps_message_and_child_traceback(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("f", 7)
    assert added is not None
    async with sandboxed(queue, "fail", conn):
        job = await finished(queue, added.id)
    assert job.state == "failed" and job.failed_reason == "bad value 7"
    stack = job.stacktrace or ""
    assert "sandbox_procs.py" in stack and "in fail" in stack and "ValueError: bad value 7" in stack


async def test_unknown_error_type_arrives_as_remote_error_with_its_name(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("f", None)
    errors: list[BaseException] = []
    assert added is not None
    async with sandboxed(queue, "fail_custom", conn) as worker:
        worker.on("failed", lambda job, err: errors.append(err))
        job = await finished(queue, added.id)
    assert job.failed_reason == "custom trouble"
    assert "CustomError: custom trouble" in (job.stacktrace or "")
    from glidemq.sandbox import RemoteError

    assert isinstance(errors[0], RemoteError)
    assert errors[0].type_name == "tests.fixtures.sandbox_procs.CustomError"


async def test_unrecoverable_error_skips_remaining_attempts(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("u", None, JobOptions(attempts=3))
    assert added is not None
    async with sandboxed(queue, "fail_unrecoverable", conn):
        job = await finished(queue, added.id)
    assert job.state == "failed" and job.failed_reason == "give up now"
    assert job.attempts_made == 1


async def test_discard_and_move_to_failed_are_proxied(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    discarded = await queue.add("d", None, JobOptions(attempts=3))
    assert discarded is not None
    async with sandboxed(queue, "fail_discard", conn):
        job = await finished(queue, discarded.id)
    assert job.failed_reason == "discarded failure" and job.attempts_made == 1
    moved = await queue.add("m", None)
    assert moved is not None
    async with sandboxed(queue, "fail_moved", conn):
        job = await finished(queue, moved.id)
    assert job.state == "failed" and job.failed_reason == "'moved by hand'"


async def test_move_to_delayed_raises_delayed_error_and_the_job_comes_back(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("d", {})
    assert added is not None
    async with sandboxed(queue, "delay_once", conn, promotion_interval=50) as worker:
        await wait_for(lambda: worker.completed_count == 1)
        job = await finished(queue, added.id)
    assert job.state == "completed" and job.returnvalue == "after delay"
    assert job.data == {"delayed": True} and worker.failed_count == 0


async def test_result_that_is_not_json_fails_the_job(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("r", None)
    assert added is not None
    async with sandboxed(queue, "returns_set", conn):
        job = await finished(queue, added.id)
    assert job.state == "failed"
    assert (job.failed_reason or "").startswith("return value is not JSON-serializable")


async def test_crash_by_exit_fails_with_the_code_retries_and_replaces_the_child(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("x", {"code": 7}, JobOptions(attempts=2))
    assert added is not None
    async with sandboxed(queue, "exit_hard", conn) as worker:
        job = await finished(queue, added.id)
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.stats()["ready"] == 1)
        assert pool.counters["crashed"] == 2 and pool.counters["started"] == 3
    assert job.state == "failed" and job.attempts_made == 2
    assert "exited with code 7 while running the job" in (job.failed_reason or "")


async def test_crash_by_signal_names_the_signal(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    killed = await queue.add("k", None)
    assert killed is not None
    async with sandboxed(queue, "kill_self", conn):
        job = await finished(queue, killed.id)
    assert "killed by signal SIGKILL (9)" in (job.failed_reason or "")
    segv = await queue.add("s", None)
    assert segv is not None
    async with sandboxed(queue, "segfault", conn):
        job = await finished(queue, segv.id)
    assert "killed by signal SIGSEGV (11)" in (job.failed_reason or "")


async def test_next_jobs_run_after_a_crash(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    await queue.add_bulk([("j", {"n": i, "crash": "exit" if i == 3 else None}) for i in range(10)])
    async with sandboxed(queue, "maybe_crash", conn, concurrency=2) as worker:
        await wait_for(lambda: worker.completed_count == 9 and worker.failed_count == 1)


async def test_import_error_leaves_jobs_waiting_without_a_respawn_storm(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("b", i) for i in range(5)])
    errors: list[BaseException] = []
    worker: Worker[Any, Any] = Worker(
        queue.name,
        "tests.fixtures.sandbox_broken:process",
        connection=conn,
        sandbox=SandboxOptions(),
        concurrency=4,
    )
    worker.on("error", errors.append)
    async with worker:
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.state == "error")
        await asyncio.sleep(1.5)  # let it retry: backoff, one probe at a time
        assert pool.state == "error"
        assert "RuntimeError: boom at import" in str(pool.last_error)
        # 4 children at first, then probes 0.25 s, 0.5 s, 1 s ... apart
        assert pool.counters["started"] <= 8, pool.stats()
        assert errors and "boom at import" in str(errors[0])
        # no job is taken, so none is burned into failed: they wait for a fixed deploy
        counts = await queue.get_job_counts()
        assert (counts.waiting, counts.active, counts.failed) == (5, 0, 0), counts
        assert worker.failed_count == 0
        assert pool.last_error is not None
        assert "sandbox_broken.py" in "".join(  # the child's traceback comes along
            traceback.format_exception(pool.last_error)
        )


async def test_crash_of_a_shared_child_fails_the_jobs_it_was_running(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    slow = await queue.add("s", {"seconds": 5})
    assert slow is not None
    options = SandboxOptions(max_children=1)  # one async child runs both jobs
    async with sandboxed(queue, "maybe_crash_later", conn, concurrency=2, sandbox=options):
        await asyncio.sleep(0)
        crash = await queue.add("c", {"crash": "exit"})
        assert crash is not None
        crashed = await finished(queue, crash.id)
        bystander = await finished(queue, slow.id)
    assert "exited with code 13 while running the job" in (crashed.failed_reason or "")
    assert bystander.failed_reason == crashed.failed_reason  # it shared the dead child


async def test_preload_imports_the_module_in_the_fork_server(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("p", "pre")
    assert added is not None
    async with sandboxed(queue, "echo", conn, sandbox=SandboxOptions(preload=True)):
        job = await finished(queue, added.id)
    assert job.returnvalue["data"] == "pre"
    broken = await queue.add("b", None)
    assert broken is not None
    worker = Worker(
        queue.name,
        "tests.fixtures.sandbox_broken:process",
        connection=conn,
        sandbox=SandboxOptions(preload=True),
    )
    async with worker:  # the fork server survives the failed preload; children report it
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.state == "error")
        assert "boom at import" in str(pool.last_error)
    job = await queue.get_job(broken.id)
    assert job is not None and job.state == "waiting"  # not taken, not failed


async def test_pool_recovers_when_the_import_is_fixed(
    queue: Queue[Any, Any], conn: ConnectionOptions, tmp_path: Any
) -> None:
    module = tmp_path / "flaky_proc.py"
    module.write_text("raise ImportError('not deployed yet')\n")
    options = SandboxOptions(max_boot_backoff=0.3)
    worker: Worker[Any, Any] = Worker(queue.name, str(module), connection=conn, sandbox=options)
    async with worker:
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: pool.state == "error")
        module.write_text("def process(job):\n    return 'deployed'\n")
        await wait_for(lambda: pool.state == "ready", timeout=10)
        added = await queue.add("j", None)
        assert added is not None
        job = await finished(queue, added.id)
    assert job.returnvalue == "deployed"


@pytest.mark.parametrize("attr", ["raising", "raising_sync"])
async def test_base_exception_in_a_sandbox_child_fails_only_its_job(
    queue: Queue[Any, Any], conn: ConnectionOptions, attr: str
) -> None:
    raising = [await queue.add("r", {"raise": e}) for e in ("KeyboardInterrupt", "SystemExit")]
    normal = [await queue.add("n", {"sleep": 0.2}) for _ in range(4)]
    worker = Worker(
        queue.name,
        f"tests.fixtures.base_exception_app:{attr}",
        connection=conn,
        sandbox=SandboxOptions(max_children=1),
        concurrency=2,
        stalled_interval=60_000,
    )
    async with worker:
        failed = [await finished(queue, j.id) for j in raising if j is not None]
        done = [await finished(queue, j.id) for j in normal if j is not None]
        pool = worker.sandbox_pool
        assert pool is not None
    assert [j.failed_reason for j in failed] == [
        "processor raised KeyboardInterrupt",
        "processor raised SystemExit: 3",
    ]
    assert all(j.state == "completed" for j in done)


async def test_nan_or_oversized_result_fails_in_the_child_as_in_process(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    nan = await queue.add("n", {"nan": True})
    big = await queue.add("b", {"size": 5000})
    ok = await queue.add("o", {"size": 10})
    worker = Worker(
        queue.name,
        "tests.fixtures.base_exception_app:returning",
        connection=conn,
        sandbox=SandboxOptions(max_children=1),
        max_result_bytes=4096,
        stalled_interval=60_000,
    )
    assert nan is not None and big is not None and ok is not None
    async with worker:
        f1, f2, done = [await finished(queue, j.id) for j in (nan, big, ok)]
    assert f1.failed_reason == "returnvalue: contains NaN or Infinity, which JSON cannot represent"
    assert f2.failed_reason == "returnvalue: serialized payload is 5002 bytes, the limit is 4096"
    assert done.returnvalue == "r" * 10
