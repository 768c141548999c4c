"""What the dashboard's actions refuse: an edit of a job a worker has fetched (with the reason
in the notice), an add or edit whose data field is empty, a job name that is too long, and
a form with too many fields (400, no traceback, before the CSRF check)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from glidemq import Queue, Worker
from tests.helpers import wait_for

from .conftest import Populated
from .test_actions import _post, _token


async def test_an_edit_of_a_job_a_worker_fetched_is_refused_with_the_reason(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    gate = asyncio.Event()
    started = asyncio.Event()

    async def gated(job: Any) -> Any:
        started.set()
        await gate.wait()
        return job.data

    name = populated.name + "-edits"  # a queue of its own: the worker takes this job first
    q: Queue[Any, Any] = Queue(name, connection=populated.url, prefix=populated.prefix)
    async with q:
        job = await q.add("edit-me", {"v": "old"})
        assert job is not None
        worker = Worker(
            name, gated, connection=populated.url, prefix=populated.prefix,
            concurrency=1, block_timeout=200,
        )  # fmt: skip
        async with worker:
            await asyncio.wait_for(started.wait(), 10)
            r = await client.post(
                "/action",
                data={"csrf": token, "queue": name, "action": "update-data",
                      "id": [job.id], "data": '{"v": "new"}'},
                headers={"accept": "application/json"},
            )  # fmt: skip
            assert r.status_code == 200
            assert r.json()["ok"] is False and "a worker has fetched it" in r.json()["detail"]
            nxt = f"/job?queue={name}&id={job.id}"
            r = await client.post(
                "/action",
                data={"csrf": token, "queue": name, "action": "update-data", "id": [job.id],
                      "data": "{}", "next": nxt},
            )  # fmt: skip
            assert r.status_code == 303
            page = await client.get(nxt)
            assert "a worker has fetched it (running or held)" in page.text
            assert 'id="edit-data"' not in page.text  # no editor for an active job
            stored = await q.get_job(job.id)
            assert stored is not None and stored.data == {"v": "old"}
            gate.set()
            await wait_for(lambda: worker.completed_count == 1)
        done = await q.get_job(job.id)
        assert done is not None and done.returnvalue == {"v": "old"}


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
async def test_an_empty_data_field_is_refused_not_stored_as_null(
    populated: Populated, client_for: Any, blank: str
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    waiting = populated.ids["waiting"][0]
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        before = (await q.get_job(waiting)).data  # type: ignore[union-attr]
        count = await q.count()
        r = await _post(client, populated, "update-data", token, id=[waiting], data=blank)
        assert r.status_code == 400 and "data: is empty" in r.text, r.text[:300]
        r = await _post(client, populated, "add", token, name="x", data=blank)
        assert r.status_code == 400 and "data: is empty" in r.text, r.text[:300]
        assert (await q.get_job(waiting)).data == before  # type: ignore[union-attr]
        assert await q.count() == count
        # null written out is a value
        r = await _post(client, populated, "update-data", token, id=[waiting], data="null")
        assert r.status_code == 303
        assert (await q.get_job(waiting)).data is None  # type: ignore[union-attr]


async def test_an_add_with_a_name_past_1024_bytes_is_refused(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        count = await q.count()
        r = await _post(client, populated, "add", token, name="n" * 1025, data="{}")
        assert r.status_code == 400 and "name: longer than 1024 bytes" in r.text
        assert await q.count() == count


async def test_a_form_with_too_many_fields_is_400_without_a_traceback(
    populated: Populated, client_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client = await client_for(populated)
    body = "&".join(f"f{i}=" for i in range(10_001))
    with caplog.at_level(logging.WARNING):
        r = await client.post(
            "/action",
            content=body,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert r.status_code == 400 and "more than 10000 fields" in r.text
    assert "Traceback" not in r.text
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
