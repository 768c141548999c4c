"""Every JSON route of the proxy against a real Valkey, through the ASGI app in this
process: adds, add-and-wait, queue actions and reads, job actions, flows, schedulers,
/health and /openapi.json."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from glidemq import Job, Queue, Worker
from glidemq.proxy.app import SPECS
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from .conftest import JSON


async def post(http: httpx.AsyncClient, path: str, body: Any = None) -> httpx.Response:
    return await http.post(path, json={} if body is None else body, headers=JSON)


async def test_add_bulk_add_get_list_and_counts(http: httpx.AsyncClient) -> None:
    r = await post(http, "/queues/mail/jobs", {"name": "welcome", "data": {"to": "a@x"}})
    assert r.status_code == 201, r.text
    first = r.json()["job"]
    assert first["name"] == "welcome" and first["state"] == "waiting"
    r = await post(
        http,
        "/queues/mail/jobs/bulk",
        {
            "jobs": [{"name": "b", "data": i} for i in range(3)]
            + [{"name": "p", "opts": {"priority": 3}}]
        },
    )
    assert r.status_code == 201 and len(r.json()["jobs"]) == 4
    r = await post(http, "/queues/mail/jobs", {"name": "x", "opts": {"job_id": first["id"]}})
    assert r.status_code == 201 and r.json() == {"job": None}  # custom id exists: skipped
    r = await http.get(f"/queues/mail/jobs/{first['id']}")
    assert r.status_code == 200 and r.json()["data"] == {"to": "a@x"}
    r = await http.get("/queues/mail/jobs", params={"state": "waiting", "limit": 2})
    page = r.json()
    assert page["total"] == 4 and len(page["jobs"]) == 2 and page["more"] is True
    r = await http.get("/queues/mail/counts")
    assert r.json()["waiting"] == 4 and r.json()["prioritized"] == 1


async def test_add_and_wait_answers_the_workers_result_or_why_not(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    async def double(job: Job[Any, Any]) -> Any:
        if job.name == "bad":
            raise ValueError("no good")
        return {"twice": job.data * 2}

    async with Worker("calc", double, connection=valkey_server.url, prefix=prefix, **FAST):
        r = await post(http, "/queues/calc/jobs/wait", {"name": "d", "data": 21, "timeout": 30})
        assert r.status_code == 200, r.text
        assert r.json() == {"result": {"twice": 42}}
        r = await post(
            http, "/queues/calc/jobs/wait", {"name": "bad", "data": 1, "opts": {"attempts": 1}}
        )
        assert r.status_code == 422 and r.json()["reason"] == "no good"
    r = await post(http, "/queues/calc/jobs/wait", {"name": "d", "data": 1, "timeout": 0.3})
    assert r.status_code == 504 and r.json()["error"] == "timeout"
    r = await post(http, "/queues/calc/jobs/wait", {"name": "d", "timeout": 10_000})
    assert r.status_code == 400 and r.json()["field"] == "timeout"


async def test_queue_actions_and_reads(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    async def fail(job: Job[Any, Any]) -> Any:
        raise ValueError("nope")

    r = await post(
        http, "/queues/ops/jobs/bulk", {"jobs": [{"name": "f", "opts": {"attempts": 1}}] * 3}
    )
    async with Queue("ops", connection=valkey_server.url, prefix=prefix) as q:
        async with Worker("ops", fail, connection=valkey_server.url, prefix=prefix, **FAST):
            await wait_for(lambda: _failed(q, 3), timeout=30)
            r = await http.get("/queues/ops/workers")
            assert r.status_code == 200 and len(r.json()["workers"]) == 1
        r = await http.get("/queues/ops/metrics", params={"kind": "failed", "minutes": 5})
        assert r.status_code == 200 and sum(r.json()["counts"]) == 3
        r = await post(http, "/queues/ops/pause")
        assert r.status_code == 200 and await q.is_paused()
        r = await post(http, "/queues/ops/resume")
        assert r.status_code == 200 and not await q.is_paused()
        r = await post(http, "/queues/ops/retry", {"state": "failed", "limit": 2})
        assert r.json()["count"] == 2 and (await q.get_job_counts()).waiting == 2
        r = await post(http, "/queues/ops/drain", {"delayed": True})
        assert r.json()["count"] == 2 and (await q.get_job_counts()).waiting == 0
        r = await post(http, "/queues/ops/clean", {"state": "failed", "grace_ms": 0})
        assert r.json()["count"] == 1 and (await q.get_job_counts()).failed == 0


async def _failed(q: Queue[Any, Any], n: int) -> bool:
    return (await q.get_job_counts()).failed >= n


async def test_job_actions(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    ids = [
        (await post(http, "/queues/jobs/jobs", {"name": n, "opts": o})).json()["job"]["id"]
        for n, o in [("p", {"priority": 5}), ("d", {"delay": 3_600_000}), ("r", {}), ("v", {})]
    ]
    p, d, r_, v = ids
    async with Queue("jobs", connection=valkey_server.url, prefix=prefix) as q:
        r = await post(http, f"/queues/jobs/jobs/{p}/priority", {"priority": 1})
        assert r.status_code == 200 and (await q.get_job(p)).priority == 1  # type: ignore[union-attr]
        r = await post(http, f"/queues/jobs/jobs/{d}/delay", {"delay": 7_200_000})
        assert r.status_code == 200 and (await q.get_job(d)).delay == 7_200_000  # type: ignore[union-attr]
        r = await post(http, f"/queues/jobs/jobs/{d}/promote")
        assert r.status_code == 200 and (await q.get_job(d)).state == "waiting"  # type: ignore[union-attr]
        r = await post(http, f"/queues/jobs/jobs/{d}/promote")
        assert r.status_code == 409  # no longer delayed
        r = await http.delete(f"/queues/jobs/jobs/{r_}")
        assert r.status_code == 200 and await q.get_job(r_) is None
        r = await http.delete(f"/queues/jobs/jobs/{r_}")
        assert r.status_code == 404
        r = await post(http, f"/queues/jobs/jobs/{v}/revoke")
        assert r.json()["outcome"] == "revoked" and (await q.get_job(v)).state == "failed"  # type: ignore[union-attr]
    r = await http.get("/queues/jobs/jobs/nope")
    assert r.status_code == 404 and r.json()["error"] == "not_found"


async def test_flows_tree_dag_read_and_revoke(http: httpx.AsyncClient) -> None:
    flow = {
        "name": "bundle",
        "queue_name": "fa",
        "children": [
            {"name": "part", "queue_name": "fb", "data": 1},
            {
                "name": "part",
                "queue_name": "fb",
                "data": 2,
                "children": [{"name": "leaf", "queue_name": "fa"}],
            },
        ],
    }
    r = await post(http, "/flows", {"flow": flow})
    assert r.status_code == 201, r.text
    root = r.json()
    assert [c["queue"] for c in root["children"]] == ["fb", "fb"]
    r = await http.get(f"/queues/fa/jobs/{root['id']}/tree")
    tree = r.json()
    assert tree["state"] == "waiting-children" and len(tree["children"]) == 2
    assert tree["name"] == "bundle" and tree["exists"] is True
    assert sum(len(c["children"]) for c in tree["children"]) == 1
    r = await http.get(f"/queues/fa/jobs/{root['id']}/tree", params={"view": "dag"})
    dag = r.json()
    assert dag["root"] == f"fa:{root['id']}" and dag["truncated"] is False
    assert len(dag["nodes"]) == 4 and len(dag["edges"]) == 3
    assert all(p in dag["nodes"] and c in dag["nodes"] for p, c in dag["edges"])
    r = await http.get(f"/queues/fa/jobs/{root['id']}/tree", params={"view": "graph"})
    assert r.status_code == 400 and r.json()["field"] == "view"
    r = await http.get("/queues/fa/jobs/no-such-job/tree")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await post(http, f"/queues/fa/jobs/{root['id']}/tree/revoke")
    assert r.status_code == 200 and len(r.json()["revoked"]) == 4
    r = await http.get(f"/queues/fa/jobs/{root['id']}")
    assert r.json()["state"] == "failed" and "revoked" in r.json()["failed_reason"]
    nodes = [
        {"name": "fetch", "queue_name": "fa"},
        {"name": "resize", "queue_name": "fa", "depends_on": ["fetch"]},
        {"name": "store", "queue_name": "fa", "depends_on": ["fetch", "resize"]},
    ]
    r = await post(http, "/flows/dag", {"nodes": nodes})
    assert r.status_code == 201 and set(r.json()) == {"fetch", "resize", "store"}
    store, fetch = r.json()["store"], r.json()["fetch"]
    r = await http.get(f"/queues/fa/jobs/{store['id']}/tree", params={"view": "dag"})
    dag = r.json()  # fetch is a child of store and of resize: one node, two edges
    assert len(dag["nodes"]) == 3 and len(dag["edges"]) == 3
    assert sum(c == f"fa:{fetch['id']}" for _, c in dag["edges"]) == 2
    r = await http.get(f"/queues/fa/jobs/{store['id']}/tree")
    tree = r.json()  # the tree lists the shared job under each parent
    assert len(tree["children"]) == 2
    taken = {"name": "again", "queue_name": "fa", "opts": {"job_id": fetch["id"]}}
    r = await post(http, "/flows", {"flow": taken})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    r = await post(
        http, "/flows/dag", {"nodes": [{"name": "a", "queue_name": "fa", "depends_on": ["a"]}]}
    )
    assert r.status_code == 400
    r = await post(
        http, "/flows", {"flow": {"name": "x", "queue_name": "fa", "children": [{"name": 3}]}}
    )
    assert r.status_code == 400 and r.json()["field"] == "flow.children[0].name"


async def test_schedulers(http: httpx.AsyncClient) -> None:
    r = await http.put(
        "/queues/sch/schedulers/nightly",
        json={"cron": "0 3 * * *", "template": {"name": "report"}},
        headers=JSON,
    )
    assert r.status_code == 200, r.text
    r = await http.get("/queues/sch/schedulers/nightly")
    assert r.status_code == 200 and r.json()["name"] == "nightly"
    r = await http.get("/queues/sch/schedulers")
    assert [s["name"] for s in r.json()["schedulers"]] == ["nightly"]
    r = await http.put("/queues/sch/schedulers/bad", json={"cron": "nope"}, headers=JSON)
    assert r.status_code == 400 and r.json()["field"] == "cron"
    r = await http.put("/queues/sch/schedulers/bad", json={"every": 5}, headers=JSON)
    assert r.status_code == 400 and r.json()["field"] == "every"
    r = await http.delete("/queues/sch/schedulers/nightly")
    assert r.status_code == 200
    r = await http.get("/queues/sch/schedulers/nightly")
    assert r.status_code == 404
    r = await http.delete("/queues/sch/schedulers/nightly")
    assert r.status_code == 404


async def test_health_and_openapi_schema_names_every_route(http: httpx.AsyncClient) -> None:
    r = await http.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    doc = (await http.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    routes = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert routes == {(s.method, s.path) for s in SPECS}
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) == len(SPECS)
    add = doc["paths"]["/queues/{queue}/jobs"]["post"]
    assert add["requestBody"]["content"]["application/json"]["schema"]["required"] == ["name"]


async def test_wait_does_not_block_other_requests(http: httpx.AsyncClient) -> None:
    waiting = asyncio.ensure_future(
        post(http, "/queues/slow/jobs/wait", {"name": "w", "timeout": 5})
    )
    r = await http.get("/health")
    assert r.status_code == 200 and not waiting.done()
    assert (await waiting).status_code == 504


async def test_mounted_in_another_starlette_app(valkey_server: ValkeyAddress, prefix: str) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from glidemq.proxy import create_app

    proxy = create_app(valkey_server.url, prefix=prefix, queues=["mounted"])
    host = Starlette(routes=[Mount("/glidemq", app=proxy)])
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        r = await post(http, "/glidemq/queues/mounted/jobs", {"name": "a", "data": [1]})
        assert r.status_code == 201
        r = await http.get("/glidemq/queues/mounted/counts")
        assert r.json()["waiting"] == 1
        assert (await http.get("/glidemq/queues/other/counts")).status_code == 403
    await proxy.state.proxy.close()


async def test_a_workflows_job_json_carries_its_steps(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str, queue_name: str
) -> None:
    from tests.durable_sample import run_sample

    runs = await run_sample(valkey_server.url, queue_name, prefix)
    r = await http.get(f"/queues/{queue_name}/jobs/{runs.waiting}")
    assert r.status_code == 200, r.text
    steps = r.json()["steps"]
    assert [(s["name"], s["kind"], s["status"]) for s in steps] == [
        ("charge", "step", "done"),
        ("square", "child", "done"),
        ("shipped", "event", "waiting"),
    ]
    assert steps[0]["result"] == {"cents": 400} and steps[1]["result"] == 16
    assert steps[1]["child"].startswith(f"{queue_name}:")
    assert steps[2]["finished_at"] is None and steps[2]["started_at"] > 0
    r = await http.get(f"/queues/{queue_name}/jobs/{runs.done}")
    assert r.json()["returnvalue"] == "300-9-dhl"
