"""Small edges: retry refuses a limit below 1 as clean does; log_lines is bounded; the
schema names the 409, 422, 429, 503 and 504 answers the routes give."""

from __future__ import annotations

from typing import Any


async def test_retry_and_clean_refuse_a_limit_below_one_alike(proxy_for: Any) -> None:
    client = await proxy_for()
    await client.post("/queues/lim/jobs", json={"name": "x", "data": {}})
    for path, body in [
        ("/queues/lim/retry", {"state": "failed", "limit": -1}),
        ("/queues/lim/retry", {"state": "failed", "limit": 0}),
        ("/queues/lim/clean", {"state": "completed", "limit": -1}),
    ]:
        r = await client.post(path, json=body)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["field"] == "limit"


async def test_log_lines_has_an_upper_bound(proxy_for: Any) -> None:
    client = await proxy_for()
    job = (await client.post("/queues/logs/jobs", json={"name": "x", "data": {}})).json()["job"]
    ok = await client.get(f"/queues/logs/jobs/{job['id']}", params={"log_lines": 10_000})
    assert ok.status_code == 200
    r = await client.get(f"/queues/logs/jobs/{job['id']}", params={"log_lines": 10_001})
    assert r.status_code == 400 and r.json()["field"] == "log_lines"


async def test_the_schema_lists_every_answer_the_routes_give(proxy_for: Any) -> None:
    client = await proxy_for()
    paths = (await client.get("/openapi.json")).json()["paths"]
    wait = paths["/queues/{queue}/jobs/wait"]["post"]["responses"]
    assert {"400", "409", "422", "429", "503", "504"} <= set(wait)
    add = paths["/queues/{queue}/jobs"]["post"]["responses"]
    assert {"201", "409", "429", "503"} <= set(add)
    promote = paths["/queues/{queue}/jobs/{job_id}/promote"]["post"]["responses"]
    assert "409" in promote
    counts = paths["/queues/{queue}/counts"]["get"]["responses"]
    assert "503" in counts and "409" not in counts
