"""The proxy's group routes: list, read, pause, resume, change limits; bad input is a 400."""

from __future__ import annotations

from typing import Any

import httpx

from glidemq import Queue, RateLimit
from tests.conftest import ValkeyAddress

from .conftest import JSON


async def _post(http: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    return await http.post(path, json=body, headers=JSON)


async def test_groups_are_listed_paused_resumed_and_limited(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    async with Queue("tenants", connection=valkey_server.url, prefix=prefix) as q:
        await q.add_bulk([("j", i, {"group_key": "acme", "group_weight": 2}) for i in range(4)])
        r = await http.get("/queues/tenants/groups")
        assert r.status_code == 200, r.text
        (acme,) = r.json()["groups"]
        assert (acme["key"], acme["weight"], acme["waiting"], acme["parked"]) == ("acme", 2, 4, 2)
        r = await _post(http, "/queues/tenants/groups/acme/pause", {})
        assert r.status_code == 200 and r.json()["paused"] is True
        assert (await q.get_group("acme")).paused  # type: ignore[union-attr]
        r = await _post(http, "/queues/tenants/groups/acme/resume", {})
        assert r.json()["paused"] is False
        body = {"concurrency": 3, "rate_limit": {"max": 5, "duration": 1000}, "max_size": 9}
        r = await _post(http, "/queues/tenants/groups/acme/limits", body)
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["concurrency"], got["max_size"]) == (3, 9)
        assert got["rate_limit"] == {"max": 5, "duration": 1000}
        assert (await q.get_group("acme")).rate_limit == RateLimit(5, 1000)  # type: ignore[union-attr]
        r = await _post(http, "/queues/tenants/groups/acme/limits", {"rate_limit": None})
        assert r.json()["rate_limit"] is None
        assert (await http.get("/queues/tenants/groups/acme")).json()["key"] == "acme"
        assert (await http.get("/queues/tenants/groups/nobody")).status_code == 404
        await q.obliterate(force=True)


async def test_bad_group_input_is_refused(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    async with Queue("tenants2", connection=valkey_server.url, prefix=prefix) as q:
        await q.add("j", 1, {"group_key": "acme", "group_concurrency": 2})
        for body in ({"concurrency": 0}, {"size": 3}, {}, {"rate_limit": {"max": 1}}):
            r = await _post(http, "/queues/tenants2/groups/acme/limits", body)
            assert r.status_code == 400, (body, r.text)
        assert (await http.get("/queues/nosuch/groups")).status_code == 404
        await q.obliterate(force=True)
