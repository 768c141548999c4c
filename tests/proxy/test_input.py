"""Job names and edits through the proxy: a name that is empty or past 1024 bytes is a 400 on
every add route; `POST .../data` replaces the data of a job no worker has taken and answers
409 with the reason once one fetched it (the server checks in the call that writes), as the
priority and delay routes do."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from glidemq import Queue, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from .conftest import JSON


async def post(http: httpx.AsyncClient, path: str, body: Any = None) -> httpx.Response:
    return await http.post(path, json={} if body is None else body, headers=JSON)


@pytest.mark.parametrize("name", ["", "n" * 1025, "é" * 513], ids=["empty", "1025", "1026-utf8"])
async def test_every_add_route_refuses_a_bad_name(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str, name: str
) -> None:
    routes: list[tuple[str, Any, str]] = [
        ("/queues/names/jobs", {"name": name}, "name"),
        ("/queues/names/jobs/bulk", {"jobs": [{"name": "ok"}, {"name": name}]}, "jobs[1].name"),
        ("/queues/names/jobs/wait", {"name": name, "timeout": 1}, "name"),
        ("/flows", {"flow": {"name": name, "queue_name": "names"}}, ".name"),
        ("/flows/dag", {"nodes": [{"name": name, "queue_name": "names", "key": "a"}]}, ".name"),
    ]
    for path, body, field in routes:
        r = await post(http, path, body)
        assert r.status_code == 400, (path, r.text[:200])
        assert r.json()["error"] == "validation" and r.json()["field"].endswith(field), (
            path,
            r.json(),
        )
    async with Queue("names", connection=valkey_server.url, prefix=prefix) as q:
        assert await q.count() == 0


async def test_replace_data_of_a_job_no_worker_has_taken_and_refuse_it_after(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    waiting = (await post(http, "/queues/ed/jobs", {"name": "w", "data": {"v": 1}})).json()["job"]
    r = await post(http, f"/queues/ed/jobs/{waiting['id']}/data", {"data": {"v": 2}})
    assert r.status_code == 200 and r.json()["ok"] is True, r.text
    r = await post(http, f"/queues/ed/jobs/{waiting['id']}/data", {})
    assert r.status_code == 400 and r.json()["field"] == "data"
    r = await post(http, "/queues/ed/jobs/nope/data", {"data": 1})
    assert r.status_code == 404
    gate = asyncio.Event()
    ran: list[Any] = []

    async def gated(job: Any) -> Any:
        ran.append(job.data)
        await gate.wait()
        return job.data

    async with Queue("ed", connection=valkey_server.url, prefix=prefix) as q:
        worker = Worker("ed", gated, connection=valkey_server.url, prefix=prefix, **FAST)
        async with worker:
            await wait_for(lambda: ran)
            for path, body in (
                ("data", {"data": {"v": 3}}),
                ("priority", {"priority": 2}),
                ("delay", {"delay": 1000}),
            ):
                r = await post(http, f"/queues/ed/jobs/{waiting['id']}/{path}", body)
                assert r.status_code == 409, (path, r.text)
                assert "a worker has fetched it" in r.json()["message"], r.json()
            stored = await q.get_job(waiting["id"])
            assert stored is not None and stored.data == {"v": 2}
            gate.set()
            await wait_for(lambda: worker.completed_count == 1)
        r = await post(http, f"/queues/ed/jobs/{waiting['id']}/data", {"data": {"v": 4}})
        assert r.status_code == 409 and "it is completed" in r.json()["message"]
    assert ran == [{"v": 2}]
