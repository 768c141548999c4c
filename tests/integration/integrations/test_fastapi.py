"""The Starlette/FastAPI helper against a real Valkey: the example app enqueues on POST
through httpx's ASGI transport and a Worker completes the job; queues open at startup and
close at shutdown; misuse is a clear error; `import glidemq` imports no web framework.

No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at
runtime, and one endpoint's dependency type is local to its test."""

import importlib
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest

pytest.importorskip("fastapi", reason="fastapi is not installed (it is in the dev extra)")
import httpx
from fastapi import Depends, FastAPI

from glidemq import GlideMQError, Queue, ValidationError, Worker
from glidemq.integrations.fastapi import GlideMQ
from tests.helpers import wait_for


def queue_clients(server: Any, name: str) -> int:
    lines = server.cli("CLIENT", "LIST").splitlines()
    return sum(f"name=glidemq-queue-{name} " in line + " " for line in lines)


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan (httpx's transport does not) and give a client for it."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            yield http


async def test_example_app_enqueues_on_post_and_a_worker_completes_it(
    valkey_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLIDEMQ_URL", valkey_server.url)
    example = importlib.reload(importlib.import_module("examples.fastapi_app.app"))
    worker_module = importlib.import_module("examples.fastapi_app.worker")
    worker: Worker[Any, Any] = Worker(
        "signups", worker_module.process.function, connection=valkey_server.url
    )
    try:
        async with serving(example.app) as http:
            created = await http.post("/signups", json={"email": "ada@example.com"})
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]
            assert (await http.get(f"/signups/{job_id}")).json()["state"] == "waiting"
            assert (await http.post("/signups", json={"nope": 1})).status_code == 422
            assert (await http.get("/signups/does-not-exist")).status_code == 404

            await worker.start()

            async def completed() -> bool:
                got = (await http.get(f"/signups/{job_id}")).json()
                return bool(got["state"] == "completed")

            await wait_for(completed)
            done = (await http.get(f"/signups/{job_id}")).json()
            assert done["result"] == {"sent_to": "ada@example.com"}
            assert queue_clients(valkey_server, "signups") == 1
        # Shutdown closed the app's queue connection.
        await wait_for(lambda: queue_clients(valkey_server, "signups") == 0)
    finally:
        await worker.close()
        async with Queue("signups", connection=valkey_server.url) as queue:
            await queue.obliterate(force=True)


async def test_lifespan_opens_once_wraps_the_apps_own_and_closes(
    valkey_server: Any, queue_name: str
) -> None:
    seen: list[str] = []

    @asynccontextmanager
    async def own(app: Any) -> AsyncIterator[dict[str, Any]]:
        seen.append("start")
        yield {"answer": 42}
        seen.append("stop")

    queues = GlideMQ([queue_name], connection=valkey_server.url, lifespan=own)
    app = FastAPI(lifespan=queues.lifespan)

    JobQueue = Annotated[Queue[Any, Any], Depends(queues.dependency(queue_name))]

    @app.post("/jobs")
    async def add(queue: JobQueue) -> Any:
        job = await queue.add("x", {})
        assert job is not None
        return {"id": job.id, "same": queue is queues.queue(queue_name)}

    with pytest.raises(GlideMQError, match="only while the app runs"):
        queues.queue(queue_name)
    async with serving(app) as http:
        assert seen == ["start"]
        ids = [(await http.post("/jobs")).json() for _ in range(3)]
        assert [i["same"] for i in ids] == [True] * 3
        assert len({i["id"] for i in ids}) == 3
        assert queue_clients(valkey_server, queue_name) == 1  # one Queue for every request
        opened = queues.queue(queue_name)
    assert seen == ["start", "stop"]
    with pytest.raises(GlideMQError, match="closed"):
        await opened.add("after", {})
    with pytest.raises(GlideMQError, match="only while the app runs"):
        queues.queue(queue_name)
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        assert (await queue.get_job_counts()).waiting == 3
        await queue.obliterate(force=True)


async def test_plain_starlette_app_reaches_its_queue(valkey_server: Any, queue_name: str) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def add(request: Request) -> JSONResponse:
        job = await GlideMQ.of(request.app).queue(queue_name).add("x", {"n": 1})
        return JSONResponse({"id": job.id if job else None})

    queues = GlideMQ([queue_name], connection=valkey_server.url)
    app = Starlette(routes=[Route("/add", add, methods=["POST"])], lifespan=queues.lifespan)
    async with serving(app) as http:
        job_id = (await http.post("/add")).json()["id"]
        assert job_id is not None
        assert (await queues.queue(queue_name).get_job(job_id)) is not None
        await queues.queue(queue_name).obliterate(force=True)


def test_misuse_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="not one string"):
        GlideMQ("emails")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="at least one"):
        GlideMQ([])
    queues = GlideMQ(["emails"])
    with pytest.raises(ValidationError, match="'other' is not one of"):
        queues.dependency("other")
    with pytest.raises(GlideMQError, match="no GlideMQ lifespan"):
        GlideMQ.of(FastAPI())


def test_import_glidemq_imports_no_web_framework() -> None:
    code = (
        "import sys, glidemq, glidemq.producer\n"
        "bad = [m for m in ('fastapi', 'starlette', 'django', 'httpx') if m in sys.modules]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
