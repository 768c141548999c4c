"""What the proxy refuses and how: bad input is a 400 naming the Python API's field, a
write without `Content-Type: application/json` is a 415 (a cross-site form cannot post),
queues outside the allowlist are 403, auth as in the dashboard, and a server fault is a
500 with an error id and nothing of the fault itself."""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx
import pytest

from glidemq import Queue
from glidemq.web.auth import BasicAuth
from tests.conftest import ValkeyAddress

from .conftest import JSON


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"data": 1}, "name"),
        ({"name": 5}, "name"),
        ({"name": "a", "opts": {"attempts": "many"}}, "attempts"),
        ({"name": "a", "opts": {"delay": -5}}, "delay"),
        ({"name": "a", "opts": {"no_such_option": 1}}, "no_such_option"),
        ({"name": "a", "opts": 3}, "opts"),
    ],
)
async def test_bad_input_is_400_with_the_python_field_name(
    http: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    r = await http.post("/queues/q/jobs", json=body, headers=JSON)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "validation" and r.json()["field"] == field


async def test_bulk_and_body_errors_name_the_item(http: httpx.AsyncClient) -> None:
    r = await http.post("/queues/q/jobs/bulk", json={"jobs": [{"name": "a"}, {}]}, headers=JSON)
    assert r.status_code == 400 and r.json()["field"] == "jobs[1].name"
    r = await http.post("/queues/q/jobs", content=b"{not json", headers=JSON)
    assert r.status_code == 400 and r.json()["field"] == "body"
    r = await http.post("/queues/q/jobs", json=[1, 2], headers=JSON)
    assert r.status_code == 400 and r.json()["field"] == "body"
    r = await http.get("/queues/q/jobs", params={"limit": "ten"})
    assert r.status_code == 400 and r.json()["field"] == "limit"
    r = await http.post("/queues/bad%20%7Bname/jobs", json={"name": "a"}, headers=JSON)
    assert r.status_code == 400 and r.json()["field"] == "queue"


async def test_writes_need_a_json_content_type(http: httpx.AsyncClient) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}
    r = await http.post("/queues/q/jobs", content=b"name=a", headers=form)
    assert r.status_code == 415
    r = await http.post("/queues/q/pause", content=b"", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    r = await http.get("/queues/q/counts")
    assert r.status_code == 404  # nothing was added, nothing paused


async def test_queues_outside_the_allowlist_are_403(proxy_for: Any) -> None:
    http: httpx.AsyncClient = await proxy_for(queues=["mail"])
    r = await http.post("/queues/mail/jobs", json={"name": "a"}, headers=JSON)
    assert r.status_code == 201
    for method, path, body in [
        ("POST", "/queues/other/jobs", {"name": "a"}),
        ("GET", "/queues/other/counts", None),
        ("GET", "/queues/other/jobs/1", None),
        ("GET", "/queues/other/events", None),
        (
            "POST",
            "/flows",
            {
                "flow": {
                    "name": "p",
                    "queue_name": "mail",
                    "children": [{"name": "c", "queue_name": "other"}],
                }
            },
        ),
        ("POST", "/broadcasts/other/messages", {"name": "m"}),
    ]:
        r = await http.request(method, path, json=body, headers=JSON)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"] == "forbidden"
    r = await http.get("/queues/mail/counts")
    assert r.json()["waiting"] == 1  # the refused flow wrote nothing


async def test_basic_auth_and_the_auth_hook(proxy_for: Any) -> None:
    http: httpx.AsyncClient = await proxy_for(basic_auth=BasicAuth({"svc": "s3cret"}))
    assert (await http.get("/health")).status_code == 401
    token = base64.b64encode(b"svc:s3cret").decode()
    r = await http.get("/health", headers={"authorization": f"Basic {token}"})
    assert r.status_code == 200
    hooked: httpx.AsyncClient = await proxy_for(
        auth=lambda request: request.headers.get("x-api-key") == "k1"
    )
    assert (await hooked.get("/health")).status_code == 403
    assert (await hooked.get("/health", headers={"x-api-key": "k1"})).status_code == 200


async def test_a_server_fault_is_500_with_an_error_id_only(
    http: httpx.AsyncClient,
    valkey_server: ValkeyAddress,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Queue("broken", connection=valkey_server.url, prefix=prefix) as q:
        await q.add("a")
        ctx = await q._context()
        # the queue's metadata hash replaced by a string: every read of it is WRONGTYPE
        await ctx.command(lambda c: c.delete([q.keys.meta]))
        await ctx.command(lambda c: c.set(q.keys.meta, "garbage"))
    with caplog.at_level(logging.ERROR, logger="glidemq.proxy"):
        r = await http.post("/queues/broken/pause", json={}, headers=JSON)
    assert r.status_code == 500, r.text
    body = r.json()
    assert set(body) == {"error", "error_id"} and body["error"] == "internal"
    assert "WRONGTYPE" not in r.text and "Traceback" not in r.text
    assert body["error_id"] in caplog.text and "WRONGTYPE" in caplog.text


async def test_an_unreachable_server_is_503_without_details(proxy_for: Any) -> None:
    from glidemq.proxy import create_app

    app = create_app("valkey://127.0.0.1:1", prefix="nowhere")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        r = await c.get("/health")
    await app.state.proxy.close()
    assert r.status_code == 503 and set(r.json()) == {"error", "error_id"}
    assert "127.0.0.1:1" not in r.text


async def test_every_answer_carries_the_security_headers(http: httpx.AsyncClient) -> None:
    r = await http.get("/health")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"


async def test_an_add_the_replicas_do_not_confirm_is_504_naming_the_job(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    # the session server has no replica: with durability nothing is ever confirmed
    from glidemq import ConnectionOptions
    from glidemq.proxy import create_app

    conn = ConnectionOptions.from_url(
        valkey_server.url, durability="replicated", durability_timeout_ms=100
    )
    app = create_app(conn, prefix=prefix)
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url="http://localhost")
    async with client as http, app.router.lifespan_context(app):
        body = {"name": "charge", "data": {"n": 1}, "opts": {"job_id": "pay-1"}}
        r = await http.post("/queues/q/jobs", json=body, headers=JSON)
        assert r.status_code == 504, r.text
        assert r.json()["error"] == "not_confirmed"
        assert r.json()["job_ids"] == ["pay-1"]
        assert "may or may not survive" in r.json()["message"]
    async with Queue("q", connection=valkey_server.url, prefix=prefix) as q:
        assert await q.get_job("pay-1") is not None  # written on the primary
        await q.obliterate(force=True)
