"""The proxy on a 3+3 Valkey cluster: adds, add-and-wait with a Python Worker, reads,
a flow inside one slot, and the 400 a flow across slots gets."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from glidemq import ConnectionOptions, Job, Worker
from tests.helpers import FAST

from .conftest import JSON

pytestmark = pytest.mark.cluster


async def test_the_proxy_on_a_cluster(valkey_cluster: Any) -> None:
    from glidemq.proxy import create_app

    conn = ConnectionOptions(addresses=tuple(valkey_cluster.addresses), cluster=True)
    prefix = f"pxc{uuid.uuid4().hex[:8]}"
    app = create_app(conn, prefix=prefix)

    async def echo(job: Job[Any, Any]) -> Any:
        return {"echo": job.data}

    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as http,
            Worker("c1", echo, connection=conn, prefix=prefix, **FAST),
        ):
            r = await http.post("/queues/c1/jobs", json={"name": "a", "data": 1}, headers=JSON)
            assert r.status_code == 201
            r = await http.post("/queues/c1/jobs/wait", json={"name": "b", "data": 2}, headers=JSON)
            assert r.json() == {"result": {"echo": 2}}
            assert (await http.get("/queues/c1/counts")).json()["completed"] == 2
            flow = {
                "name": "p",
                "queue_name": "c1",
                "children": [{"name": "c", "queue_name": "c1"}],
            }
            assert (await http.post("/flows", json={"flow": flow}, headers=JSON)).status_code == 201
            far = {
                "name": "p",
                "queue_name": "c1",
                "children": [{"name": "c", "queue_name": "zz9"}],
            }
            r = await http.post("/flows", json={"flow": far}, headers=JSON)
            assert r.status_code == 400 and r.json()["error"] == "cross_slot"
    finally:
        await app.state.proxy.close()
