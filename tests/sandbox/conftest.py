"""Fixtures of the sandbox tests: a connection to the session's Valkey, a fresh queue, and
sandboxed workers running the processors of tests/fixtures/sandbox_procs.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.sandbox import SandboxOptions
from tests.helpers import wait_for

PROCS = "tests.fixtures.sandbox_procs"


@pytest.fixture
def conn(valkey_server: Any) -> ConnectionOptions:
    return ConnectionOptions.from_url(valkey_server.url)


@pytest.fixture
async def queue(conn: ConnectionOptions, queue_name: str) -> AsyncIterator[Queue[Any, Any]]:
    q: Queue[Any, Any] = Queue(queue_name, connection=conn)
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()


def sandboxed(
    queue: Queue[Any, Any],
    attr: str,
    conn: ConnectionOptions,
    *,
    sandbox: SandboxOptions | None = None,
    **worker: Any,
) -> Worker[Any, Any]:
    """A (not yet started) Worker running `sandbox_procs.<attr>` in a sandbox."""
    worker.setdefault("stalled_interval", 60_000)
    worker.setdefault("close_timeout", 5.0)
    return Worker(
        queue.name,
        f"{PROCS}:{attr}",
        connection=conn,
        sandbox=sandbox or SandboxOptions(),
        **worker,
    )


async def finished(queue: Queue[Any, Any], job_id: str, timeout: float = 15.0) -> Job[Any, Any]:
    """The job once it is completed or failed for good."""

    async def done() -> Job[Any, Any] | None:
        job = await queue.get_job(job_id)
        return job if job is not None and job.state in ("completed", "failed") else None

    result: Job[Any, Any] = await wait_for(done, timeout=timeout, interval=0.05)
    return result
