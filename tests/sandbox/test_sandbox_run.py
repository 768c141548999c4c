"""Running jobs in sandbox children: results, job fields, proxied Job methods, sync and
async processors, targets, options, both start methods."""

from __future__ import annotations

import os
from typing import Any

import pytest

from glidemq import (
    ConnectionOptions,
    FlowJob,
    FlowProducer,
    Queue,
    ValidationError,
    Worker,
    WorkerOptions,
)
from glidemq.sandbox import SandboxOptions
from tests.fixtures import sandbox_procs
from tests.helpers import wait_for

from .conftest import PROCS, finished, sandboxed


async def test_jobs_run_in_children_and_results_are_stored(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    jobs = await queue.add_bulk([("echo", {"n": i}) for i in range(40)])
    async with sandboxed(queue, "echo", conn, concurrency=4) as worker:
        await wait_for(lambda: worker.completed_count == 40)
        pool = worker.sandbox_pool
        assert pool is not None and pool.size == 4 and len(pool.pids) == 4
    pids = set()
    for added in jobs:
        assert added is not None
        job = await queue.get_job(added.id)
        assert job is not None and job.state == "completed"
        rv = job.returnvalue
        assert rv["data"] == added.data and rv["id"] == added.id and rv["name"] == "echo"
        assert rv["queue"] == queue.name and rv["is_job"] is True and rv["attempts_made"] == 0
        pids.add(rv["pid"])
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 4  # warm children are reused, none per job


async def test_proxied_job_methods_act_on_the_server(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("m", {"original": True})
    assert added is not None
    async with sandboxed(queue, "methods", conn):
        job = await finished(queue, added.id)
    assert job.state == "completed", job.failed_reason
    assert job.returnvalue == {
        "lines": 1,
        "state": "active",
        "revoked": False,
        "data": {"changed": True},
    }
    assert job.data == {"changed": True} and job.progress == 50
    assert await queue.get_job_logs(added.id) == (["first line", "second line"], 2)


async def test_sync_processor_runs_in_the_child(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("s", [1, 2])
    async with sandboxed(queue, "echo_sync", conn, concurrency=3) as worker:
        assert added is not None
        job = await finished(queue, added.id)
        pool = worker.sandbox_pool
        assert pool is not None and pool.is_async is False
        await wait_for(lambda: len(pool.pids) == 3)  # sync: one child per concurrency slot
    assert job.state == "completed"
    assert job.returnvalue["data"] == [1, 2] and job.returnvalue["pid"] != os.getpid()


async def test_sync_processor_may_run_its_own_event_loop(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    added = await queue.add("s", None)
    assert added is not None
    async with sandboxed(queue, "sync_uses_asyncio_run", conn):
        job = await finished(queue, added.id)
    assert job.state == "completed" and job.returnvalue == 42, job.failed_reason


async def test_async_children_can_run_several_jobs_each(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    await queue.add_bulk([("s", {"seconds": 0.3}) for _ in range(8)])
    options = SandboxOptions(max_children=2)
    async with sandboxed(queue, "slow", conn, concurrency=8, sandbox=options) as worker:
        pool = worker.sandbox_pool
        assert pool is not None
        await wait_for(lambda: worker.completed_count == 8)
        assert pool.is_async is True and len(pool.pids) == 2
    jobs = await queue.get_jobs(["completed"])
    spans = sorted((j.processed_on or 0, j.finished_on or 0) for j in jobs)
    assert spans[-1][0] < spans[0][1]  # all 8 ran at once, 4 on each child
    assert len({j.returnvalue for j in jobs}) == 2


async def test_spawn_start_method(queue: Queue[Any, Any], conn: ConnectionOptions) -> None:
    added = await queue.add("s", "x")
    options = SandboxOptions(start_method="spawn", max_children=1)
    async with sandboxed(queue, "echo", conn, sandbox=options) as worker:
        assert added is not None
        job = await finished(queue, added.id, timeout=30)
        assert worker.sandbox_pool is not None and worker.sandbox_pool.forkserver_pid is None
    assert job.state == "completed" and job.returnvalue["data"] == "x"


async def test_file_target_with_default_attr_and_module_level_callable(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    path = os.path.join(os.path.dirname(sandbox_procs.__file__), "sandbox_procs.py")
    added = await queue.add("f", None)
    async with Worker(queue.name, path, connection=conn, sandbox=SandboxOptions()):
        assert added is not None
        job = await finished(queue, added.id)
    assert job.returnvalue == "default attr"  # path alone means attribute `process`
    added = await queue.add("g", "by reference")
    async with Worker(queue.name, sandbox_procs.echo, connection=conn, sandbox=SandboxOptions()):
        assert added is not None
        job = await finished(queue, added.id)
    assert job.returnvalue["data"] == "by reference"


def test_targets_are_checked_when_the_worker_is_built() -> None:
    with pytest.raises(ValidationError, match="runs only with sandbox"):
        Worker("q", f"{PROCS}:echo")  # a string is not callable without a sandbox
    with pytest.raises(ValidationError, match="must be callable"):
        Worker("q", 42)  # type: ignore[arg-type]
    for bad in ("not a module", "mod:", "mod:not-an-attr", "/no/such/file.py", ""):
        with pytest.raises(ValidationError, match="processor"):
            Worker("q", bad, sandbox=SandboxOptions())
    with pytest.raises(ValidationError, match="inside a function"):
        Worker("q", lambda job: None, sandbox=SandboxOptions())


def test_sandbox_options_are_validated() -> None:
    for bad in (
        {"max_children": 0},
        {"child_concurrency": 0},
        {"start_method": "fork"},
        {"timeout": 0},
        {"max_jobs_per_child": 0},
        {"max_memory_per_child_mb": -1},
        {"kill_grace": -1},
        {"boot_timeout": 0},
        {"preload": "yes"},
    ):
        with pytest.raises(ValidationError, match="sandbox"):
            SandboxOptions(**bad)
    with pytest.raises(ValidationError, match="sandbox"):
        WorkerOptions(sandbox={"max_children": 2})  # type: ignore[arg-type]
    assert SandboxOptions(max_memory_per_child_mb=100).hard_limit_bytes == 200 << 20
    assert (
        SandboxOptions(max_memory_per_child_mb=100, memory_hard_limit_mb=0).hard_limit_bytes is None
    )


async def test_flow_reads_are_proxied_to_the_parent(
    queue: Queue[Any, Any], conn: ConnectionOptions
) -> None:
    async with FlowProducer(connection=conn) as flows:
        node = await flows.add(
            FlowJob(
                "parent",
                queue.name,
                {},
                children=[
                    FlowJob("ok", queue.name, {}),
                    FlowJob(
                        "bad",
                        queue.name,
                        {"fail": True},
                        {"ignore_dependency_on_failure": True},
                    ),
                ],
            )
        )
    ok, bad = node.children[0].job, node.children[1].job
    async with sandboxed(queue, "flow_reads", conn, concurrency=2):
        parent = await finished(queue, node.job.id)
    assert parent.state == "completed", parent.failed_reason
    rv = parent.returnvalue
    ok_key, bad_key = f"{queue.name}:{ok.id}", f"{queue.name}:{bad.id}"
    assert rv["values"] == {ok_key: {"parents": [[queue.name, node.job.id]]}}
    assert rv["failures"] == rv["ignored"] == rv["failed"] == {bad_key: "child says no"}
    assert rv["processed"] == rv["values"] and rv["counts"] == [1, 1, 0]
    assert rv["parents"] == []
