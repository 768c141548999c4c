"""DNS rebinding against the proxy: with a foreign `Host` nothing is read, added or
drained; a foreign `Origin` on an allowed host is refused too (the proxy has no CORS)."""

from __future__ import annotations

from typing import Any

from glidemq import Queue


async def test_a_foreign_host_can_neither_add_nor_read_nor_drain(
    proxy_for: Any, valkey_server: Any, prefix: str
) -> None:
    client = await proxy_for()
    rebound = {"Host": "evil.example:8081", "Origin": "http://evil.example:8081"}
    add = await client.post("/queues/q1/jobs", json={"name": "x", "data": {}}, headers=rebound)
    assert add.status_code == 400
    assert (await client.get("/queues/q1/counts", headers=rebound)).status_code == 400
    assert (await client.get("/health", headers={"Host": "evil.example"})).status_code == 400
    assert (await client.post("/queues/q1/drain", headers=rebound)).status_code == 400
    async with Queue("q1", connection=valkey_server.url, prefix=prefix) as q:
        assert (await q.get_job_counts()).waiting == 0


async def test_a_foreign_origin_on_loopback_is_refused(
    proxy_for: Any, valkey_server: Any, prefix: str
) -> None:
    client = await proxy_for()
    r = await client.post(
        "/queues/q2/jobs", json={"name": "x", "data": {}}, headers={"Origin": "http://evil.example"}
    )
    assert r.status_code == 403
    ok = await client.post("/queues/q2/jobs", json={"name": "x", "data": {}})
    assert ok.status_code in (200, 201)
    async with Queue("q2", connection=valkey_server.url, prefix=prefix) as q:
        assert (await q.get_job_counts()).waiting == 1


async def test_allowed_hosts_lets_a_named_host_in(proxy_for: Any) -> None:
    client = await proxy_for(allowed_hosts=["jobs.internal"])
    assert (await client.get("/health", headers={"Host": "jobs.internal:8081"})).status_code == 200
    assert (await client.get("/health", headers={"Host": "other.internal"})).status_code == 400
