"""A flow parent failed by a child shows that child, linked, wherever the tree is shown: the
dashboard's job page, `glidemq job` and the admin detail (not only as key text in the
parent's failure reason)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import httpx

from glidemq import FlowJob, FlowProducer, Job, Queue, Worker
from glidemq.admin.session import Admin
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_state

from ...cli.conftest import REPO_ROOT, cli_env


async def _work(job: Job[Any, Any]) -> int:
    if job.name == "flaky":
        raise RuntimeError("upstream down")
    return 1


async def test_every_reader_shows_the_child_that_failed_the_parent(
    valkey_server: ValkeyAddress, queue_name: str
) -> None:
    from glidemq.dashboard import create_app

    url = valkey_server.url
    async with Queue(queue_name, connection=url) as queue, FlowProducer(connection=url) as fp:
        node = await fp.add(
            FlowJob(
                "report",
                queue_name,
                children=[FlowJob("ok", queue_name), FlowJob("flaky", queue_name)],
            )
        )
        bad_id = node.children[1].job.id
        async with Worker(queue_name, _work, connection=url, concurrency=2, **FAST):
            await wait_state(queue, node.job.id, "failed")
        async with Admin(url) as admin:
            detail = await admin.job(queue_name, node.job.id)
        assert detail.children_failures == {f"{queue_name}:{bad_id}": "upstream down"}

        app = create_app(url)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            page = await http.get("/job", params={"queue": queue_name, "id": node.job.id})
        await app.state.dashboard.close()
        assert page.status_code == 200
        assert f"id={bad_id}" in page.text and "child, failed" in page.text

        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "glidemq.admin.cli", "job", queue_name, node.job.id],
            cwd=REPO_ROOT,
            env=cli_env({"GLIDEMQ_URL": url}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert f"{queue_name}:{bad_id}" in done.stdout and "upstream down" in done.stdout
        await queue.obliterate(force=True)
