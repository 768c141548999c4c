"""`glidemq update-data`: replaces the data of a job no worker has taken, from an argument or
stdin, and exits 2 with the reason when a worker has fetched it, it finished, it does not
exist, or the JSON is empty or malformed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from glidemq import Queue, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from .test_admin import Runner, glidemq, queue

__all__ = ["glidemq", "queue"]  # the fixtures, shared with test_admin


async def test_update_data_replaces_the_data_of_a_waiting_job(
    glidemq: Runner, queue: Queue[Any, Any]
) -> None:
    job = await queue.add("edit", {"v": 1})
    assert job is not None
    done = await glidemq("update-data", queue.name, job.id, '{"v": 2}')
    assert done.returncode == 0, done.stderr
    assert f"updated {job.id}" in done.stdout and "waiting" in done.stdout
    done = await glidemq("update-data", queue.name, job.id, "-", "--json", stdin='[1, "two"]')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["ok"] is True
    assert (await job.refresh()).data == [1, "two"]
    for bad, says in (("", "empty"), ("  ", "empty"), ("{nope", "not JSON")):
        done = await glidemq("update-data", queue.name, job.id, bad)
        assert done.returncode == 2 and says in done.stderr, (bad, done.stderr)
    done = await glidemq("update-data", queue.name, "404", "{}")
    assert done.returncode == 2 and "not found" in done.stdout
    assert (await job.refresh()).data == [1, "two"]


async def test_update_data_is_refused_once_a_worker_fetched_the_job(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    gate = asyncio.Event()
    ran: list[Any] = []

    async def gated(job: Any) -> Any:
        ran.append(job.data)
        await gate.wait()
        return job.data

    job = await queue.add("edit", {"v": "old"})
    assert job is not None
    async with Worker(queue.name, gated, connection=valkey_server.url, **FAST) as worker:
        await wait_for(lambda: ran)
        done = await glidemq("update-data", queue.name, job.id, '{"v": "new"}')
        assert done.returncode == 2
        assert "a worker has fetched it (running or held)" in done.stdout, done.stdout
        gate.set()
        await wait_for(lambda: worker.completed_count == 1)
    done = await glidemq("update-data", queue.name, job.id, '{"v": "new"}')
    assert done.returncode == 2 and "it is completed" in done.stdout
    assert ran == [{"v": "old"}] and (await job.refresh()).data == {"v": "old"}
