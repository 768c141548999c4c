"""The proxy's routes on the engine's AI-native features against a real Valkey: a job's
output stream (SSE until the job finished, resumed by `Last-Event-ID` or `last_id`, and a
plain JSON read), and suspend and signal (the suspended list with reasons and deadlines, a
signal that wakes the job, 400 / 404 / 409 for what cannot be signalled)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from glidemq import Job, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from .conftest import JSON

CHUNKS = ["You ", "said ", {"tool": "calc", "args": [1, 2]}, "done"]


def sse_events(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body: {event, id, data} each (comments and retry left out)."""
    out = []
    for frame in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in frame.splitlines():
            key, _, value = line.partition(": ")
            if key in ("event", "id", "data"):
                fields[key] = value
        if "event" in fields:
            fields["data"] = json.loads(fields["data"])
            out.append(fields)
    return out


async def talk(job: Job[Any, Any]) -> str:
    for chunk in CHUNKS:
        await job.stream(chunk)
        await asyncio.sleep(0.01)
    return "ok"


async def test_job_output_stream_follows_until_finished_and_resumes(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    r = await http.post("/queues/chat/jobs", json={"name": "talk"}, headers=JSON)
    job_id = r.json()["job"]["id"]
    path = f"/queues/chat/jobs/{job_id}/stream"
    async with Worker("chat", talk, connection=valkey_server.url, prefix=prefix, **FAST):
        # the job has not run yet: the stream follows it until it finished
        r = await http.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert [e["event"] for e in events] == ["ready", *["chunk"] * len(CHUNKS), "end"]
    chunks = [e for e in events if e["event"] == "chunk"]
    assert [c["data"] for c in chunks] == CHUNKS
    assert all(c["id"] for c in chunks) and "id" not in events[0] and "id" not in events[-1]
    assert events[-1]["data"] == {"state": "completed"}

    # resume after the second chunk, by header and by parameter
    after = chunks[1]["id"]
    for resumed in (
        await http.get(path, headers={"last-event-id": after}),
        await http.get(path, params={"last_id": after}),
    ):
        again = sse_events(resumed.text)
        assert [e["data"] for e in again if e["event"] == "chunk"] == CHUNKS[2:]
        assert again[-1]["event"] == "end"

    # the plain read, in pages
    r = await http.get(path + "/chunks")
    body = r.json()
    assert r.status_code == 200 and [c["data"] for c in body["chunks"]] == CHUNKS
    assert [c["id"] for c in body["chunks"]] == [c["id"] for c in chunks]
    assert body["last_id"] == chunks[-1]["id"] and body["state"] == "completed"
    assert body["finished"] is False  # chunks came back: ask again after last_id
    r = await http.get(path + "/chunks", params={"last_id": body["last_id"]})
    assert r.json()["chunks"] == [] and r.json()["finished"] is True

    r = await http.get(path, params={"last_id": "nope"})
    assert r.status_code == 400 and r.json()["field"] == "last_id"
    r = await http.get(path + "/chunks", headers={"last-event-id": "1-x"})
    assert r.status_code == 400 and r.json()["field"] == "last_id"
    r = await http.get("/queues/chat/jobs/no-such-job/stream")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await http.get("/queues/never-used/jobs/1/stream/chunks")
    assert r.status_code == 404


async def approve(job: Job[Any, Any]) -> Any:
    if not job.signals:
        await job.suspend(
            reason=f"refund of {job.data['amount']} needs approval", timeout_ms=600_000
        )
    return {"by": job.signals[-1].name, "approved": job.signals[-1].data["approved"]}


async def test_suspended_list_and_signal(
    http: httpx.AsyncClient, valkey_server: ValkeyAddress, prefix: str
) -> None:
    r = await http.post("/queues/refunds/jobs", json={"name": "refund", "data": {"amount": 42}})
    job_id = r.json()["job"]["id"]
    async with Worker("refunds", approve, connection=valkey_server.url, prefix=prefix, **FAST):

        async def listed() -> Any:
            page = (await http.get("/queues/refunds/suspended")).json()
            return page if page["jobs"] else None

        before = int(time.time() * 1000)
        page = await wait_for(listed)
        assert page["total"] == 1 and page["more"] is False
        [entry] = page["jobs"]
        assert entry["id"] == job_id and entry["state"] == "suspended"
        assert entry["reason"] == "refund of 42 needs approval" and entry["signals"] == []
        assert before - 60_000 < entry["until"] - 600_000 <= int(time.time() * 1000)

        signal = f"/queues/refunds/jobs/{job_id}/signal"
        for body, field in [
            ({}, "name"),
            ({"name": ""}, "name"),
            ({"name": 7}, "name"),
            ({"name": "alice", "data": 1, "extra": True}, "extra"),
        ]:
            r = await http.post(signal, json=body, headers=JSON)
            assert r.status_code == 400 and r.json()["field"] == field, (body, r.text)
        r = await http.post(
            signal, content=b'{"name": "alice"}', headers={"content-type": "text/plain"}
        )
        assert r.status_code == 415
        assert (await http.get("/queues/refunds/suspended")).json()["total"] == 1  # untouched

        r = await http.post(
            signal, json={"name": "alice", "data": {"approved": True}}, headers=JSON
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"queue": "refunds", "id": job_id, "signal": "alice", "state": "waiting"}

        async def finished() -> Any:
            job = (await http.get(f"/queues/refunds/jobs/{job_id}")).json()
            return job if job["state"] == "completed" else None

        job = await wait_for(finished)
        assert job["returnvalue"] == {"by": "alice", "approved": True}
    assert (await http.get("/queues/refunds/suspended")).json() == {
        "jobs": [],
        "total": 0,
        "more": False,
    }

    # a job that is not suspended: 409 saying so; an unknown one: 404
    r = await http.post(signal, json={"name": "bob"}, headers=JSON)
    assert r.status_code == 409, r.text
    assert r.json()["error"] == "not_suspended" and r.json()["state"] == "completed"
    assert "not suspended" in r.json()["message"]
    r = await http.post("/queues/refunds/jobs/nobody/signal", json={"name": "bob"}, headers=JSON)
    assert r.status_code == 404
    r = await http.get("/queues/never-used/suspended")
    assert r.status_code == 404
    r = await http.get("/queues/refunds/suspended", params={"limit": 0})
    assert r.status_code == 400 and r.json()["field"] == "limit"


async def test_new_routes_respect_the_allowlist(proxy_for: Any) -> None:
    http: httpx.AsyncClient = await proxy_for(queues=["mail"])
    for method, path, body in [
        ("GET", "/queues/other/suspended", None),
        ("POST", "/queues/other/jobs/1/signal", {"name": "a"}),
        ("GET", "/queues/other/jobs/1/stream", None),
        ("GET", "/queues/other/jobs/1/stream/chunks", None),
        ("GET", "/queues/other/jobs/1/tree", None),
    ]:
        r = await http.request(method, path, json=body, headers=JSON)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"] == "forbidden"
