"""One job with malformed stored data (any producer can write anything: NaN, truncated JSON,
a number out of range, options that are not an object, `gz:` data that inflates to 40 MB)
must not break a reader. Every reader shows the stored text with the decode error, and
none inflates the bomb; nothing answers 500 or prints a traceback; the job can be removed;
a worker fails it once ("cannot decode job")."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import subprocess
import sys
from typing import Any

import httpx
import pytest

from glidemq import Job, Queue, Worker
from glidemq.admin.session import Admin
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from ...cli.conftest import REPO_ROOT, cli_env

BAD = {
    "nan": ("data", b'{"a": NaN}'),
    "truncated": ("data", b'{"a": [1, 2'),
    "huge": ("data", b"1e999"),
    "opts": ("opts", b'["not", "an", "object"]'),
    "bytes": ("data", b"\xff\xfe{"),
    # valid JSON once inflated: 40 MB from 40 KB stored
    "gzbomb": ("data", b"gz:" + base64.b64encode(gzip.compress(b"[" + b"0," * 20_000_000 + b"0]"))),
}


async def _bad_job(server: ValkeyAddress, queue: Queue[Any, Any], kind: str) -> str:
    job = await queue.add("bad", {"ok": True})
    assert job is not None
    field, raw = BAD[kind]
    key = f"{queue.keys.base}job:{job.id}"
    # valkey-cli takes argv as text: write the bytes through a raw RESP call instead
    from glidemq.server.valkey import _call

    _call(server.host, server.port, "HSET", key, field, raw)
    return job.id


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_every_reader_shows_a_malformed_job_and_it_can_be_removed(
    valkey_server: ValkeyAddress, queue_name: str, kind: str
) -> None:
    from glidemq.dashboard import create_app as dashboard_app
    from glidemq.proxy import create_app as proxy_app

    async with Queue(queue_name, connection=valkey_server.url) as queue:
        job_id = await _bad_job(valkey_server, queue, kind)
        job = await queue.get_job(job_id)
        assert job is not None and job.decode_error is not None
        assert BAD[kind][0] in job.decode_error
        if BAD[kind][0] == "data":
            assert isinstance(job.data, str)  # the stored text, for a reader to show
        assert [j.id for j in await queue.get_jobs("waiting")] == [job_id]

        async with Admin(valkey_server.url) as admin:
            detail = await admin.job(queue_name, job_id)
            assert detail.decode_error == job.decode_error
            page = await admin.jobs(queue_name, ["waiting"])
            assert page.jobs[0].decode_error == job.decode_error

        proxy = proxy_app(valkey_server.url)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=proxy), base_url="http://localhost"
        ) as http:
            one = await http.get(f"/queues/{queue_name}/jobs/{job_id}")
            assert one.status_code == 200, one.text
            assert one.json()["decode_error"] == job.decode_error
            listing = await http.get(f"/queues/{queue_name}/jobs", params={"state": "waiting"})
            assert listing.status_code == 200, listing.text
        await proxy.state.proxy.close()

        dash = dashboard_app(valkey_server.url)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=dash), base_url="http://localhost"
        ) as http:
            page_r = await http.get("/job", params={"queue": queue_name, "id": job_id})
            assert page_r.status_code == 200, page_r.text
            assert "cannot be decoded" in page_r.text
            tab = await http.get("/queue", params={"name": queue_name, "state": "waiting"})
            assert tab.status_code == 200
        await dash.state.dashboard.close()

        for args in (["job", queue_name, job_id], ["jobs", queue_name], ["job", queue_name,
                     job_id, "--json"]):  # fmt: skip
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "glidemq.admin.cli", *args],
                cwd=REPO_ROOT, env=cli_env({"GLIDEMQ_URL": valkey_server.url}),
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr
            if "--json" in args:
                assert json.loads(done.stdout)["decode_error"] == job.decode_error
            elif args[0] == "job":
                assert "cannot be decoded" in done.stdout

        removed = await queue.remove(job_id)
        assert removed is None or removed in (True, 1)
        assert await queue.get_job(job_id) is None
        await queue.obliterate(force=True)


@pytest.mark.parametrize("kind", ["nan", "gzbomb"])
async def test_a_worker_fails_a_malformed_job_once_and_goes_on(
    valkey_server: ValkeyAddress, queue_name: str, kind: str
) -> None:
    ran: list[str] = []

    async def work(job: Job[Any, Any]) -> None:
        ran.append(job.id)

    async with Queue(queue_name, connection=valkey_server.url) as queue:
        bad = await _bad_job(valkey_server, queue, kind)
        good = await queue.add("good", {})
        assert good is not None
        async with Worker(queue_name, work, connection=valkey_server.url, **FAST):

            async def settled() -> bool:
                counts = await queue.get_job_counts()
                return counts.completed == 1 and counts.failed == 1

            await wait_for(settled, timeout=20)
        failed = await queue.get_job(bad)
        assert failed is not None and failed.state == "failed"
        assert failed.failed_reason is not None
        assert failed.failed_reason.startswith("cannot decode job: data:")
        if kind == "gzbomb":
            assert "inflates to more than 1048576 bytes" in failed.failed_reason
        assert ran == [good.id]
        await queue.obliterate(force=True)
