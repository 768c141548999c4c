"""The dashboard's actions over ASGI against a real Valkey: each one changes the queue as
named; CSRF tokens, foreign origins and read-only mode refuse them with 403 and change
nothing."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from glidemq import Queue

from .conftest import Populated, csrf_of


async def _token(client: httpx.AsyncClient, p: Populated) -> str:
    page = await client.get("/queue", params={"name": p.name, "state": "failed"})
    assert page.status_code == 200
    return csrf_of(page.text)


async def _post(
    client: httpx.AsyncClient, p: Populated, action: str, token: str, **fields: Any
) -> httpx.Response:
    form: dict[str, Any] = {"csrf": token, "queue": p.name, "action": action, **fields}
    return await client.post("/action", data=form)


async def _state(p: Populated, job_id: str) -> str | None:
    async with Queue(p.name, connection=p.url, prefix=p.prefix) as q:
        job = await q.get_job(job_id)
        return None if job is None else str(job.state)


async def test_retry_selected_failed_jobs_sends_them_to_waiting_and_says_so(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    ids = populated.ids["failed"]
    nxt = f"/queue?name={populated.name}&state=failed"
    r = await _post(client, populated, "retry", token, id=ids, next=nxt)
    assert r.status_code == 303 and r.headers["location"] == nxt
    for job_id in ids:
        assert await _state(populated, job_id) == "waiting"
    page = await client.get(nxt)
    assert re.search(r'<p class="notice" id="notice">retry: 2 done</p>', page.text)
    again = await client.get(nxt)
    assert 'id="notice"' not in again.text  # shown once


async def test_remove_promote_and_change_priority(populated: Populated, client_for: Any) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    done = populated.ids["completed"][0]
    assert (await _post(client, populated, "remove", token, id=[done])).status_code == 303
    assert await _state(populated, done) is None
    delayed = populated.ids["delayed"][0]
    assert (await _post(client, populated, "promote", token, id=[delayed])).status_code == 303
    assert await _state(populated, delayed) == "waiting"
    prio = populated.ids["prioritized"][0]
    r = await _post(client, populated, "priority", token, id=[prio], priority="9")
    assert r.status_code == 303
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.get_job(prio)
        assert job is not None and job.priority == 9


async def test_retry_all_clean_pause_and_resume(populated: Populated, client_for: Any) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        r = await _post(client, populated, "retry-all", token, state="dead_letter")
        assert r.status_code == 303
        assert (await q.get_job_counts()).dead_letter == 0
        assert await _state(populated, populated.ids["dead_letter"][0]) == "waiting"
        r = await _post(client, populated, "clean", token, state="completed", grace="0")
        assert r.status_code == 303
        assert (await q.get_job_counts()).completed == 0
        assert (await _post(client, populated, "pause", token)).status_code == 303
        assert await q.is_paused()
        page = await client.get("/queue", params={"name": populated.name})
        assert 'id="resume"' in page.text and 'id="pause"' not in page.text
        assert (await _post(client, populated, "resume", token)).status_code == 303
        assert not await q.is_paused()


async def test_an_action_answers_json_when_asked(populated: Populated, client_for: Any) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    r = await client.post(
        "/action",
        data={"csrf": token, "queue": populated.name, "action": "retry", "id": ["nope"]},
        headers={"Accept": "application/json"},
    )
    assert r.status_code == 200
    assert r.json() == [
        {
            "queue": populated.name,
            "action": "retry",
            "id": "nope",
            "ok": False,
            "detail": "not found",
        }
    ]


async def test_bad_action_input_is_400_and_an_unknown_queue_404(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    assert (await _post(client, populated, "explode", token)).status_code == 400
    assert (await _post(client, populated, "retry", token)).status_code == 400  # no ids
    r = await _post(client, populated, "clean", token, state="completed", grace="soon")
    assert r.status_code == 400 and "grace" in r.text
    r = await client.post("/action", data={"csrf": token, "queue": "nowhere", "action": "pause"})
    assert r.status_code == 404


@pytest.mark.parametrize("how", ["missing", "wrong", "no-cookie", "foreign-origin"])
async def test_an_action_without_a_valid_csrf_token_is_refused(
    populated: Populated, client_for: Any, how: str
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    form = {"queue": populated.name, "action": "pause", "csrf": token}
    headers = {}
    if how == "missing":
        del form["csrf"]
    elif how == "wrong":
        form["csrf"] = token[:-4] + "AAAA"
    elif how == "no-cookie":
        client.cookies.clear()
    else:
        headers["Origin"] = "http://evil.example"
    r = await client.post("/action", data=form, headers=headers)
    assert r.status_code == 403
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        assert not await q.is_paused()


async def test_read_only_hides_every_action_and_refuses_them_with_403(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated, read_only=True)
    pages = [
        await client.get("/"),
        await client.get("/queue", params={"name": populated.name, "state": "failed"}),
        await client.get(
            "/job", params={"queue": populated.name, "id": populated.ids["failed"][0]}
        ),
    ]
    for page in pages:
        assert page.status_code == 200
        assert 'action="/action"' not in page.text
        assert 'name="csrf"' not in page.text
        assert "read-only" in page.text
    # A token taken from a writable dashboard on the same server does not help.
    writable = await client_for(populated)
    token = await _token(writable, populated)
    client.cookies.update(writable.cookies)
    for action, extra in [
        ("retry", {"id": populated.ids["failed"]}), ("remove", {"id": populated.ids["completed"]}),
        ("pause", {}), ("clean", {"state": "completed", "grace": "0"}),
        ("retry-all", {"state": "failed"}), ("promote", {"id": populated.ids["delayed"]}),
        ("priority", {"id": populated.ids["prioritized"], "priority": "1"}), ("resume", {}),
    ]:  # fmt: skip
        r = await _post(client, populated, action, token, **extra)
        assert r.status_code == 403, action
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        c = await q.get_job_counts()
        assert (c.failed, c.completed, c.delayed, c.paused) == (2, 3, 1, False)


async def test_redirect_after_an_action_stays_on_the_dashboard(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        r = await _post(client, populated, "pause", token, next=target)
        assert r.status_code == 303
        assert r.headers["location"] == f"/queue?name={populated.name}", target


async def test_cancel_revokes_a_job_that_has_not_run_and_refuses_a_finished_one(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    delayed = populated.ids["delayed"][0]
    page = await client.get("/job", params={"queue": populated.name, "id": delayed})
    assert 'id="job-revoke"' in page.text
    r = await _post(client, populated, "revoke", token, id=[delayed])
    assert r.status_code == 303
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.get_job(delayed)
        assert job is not None and job.state == "failed" and job.failed_reason == "revoked"
    done = populated.ids["completed"][0]
    r = await client.post(
        "/action",
        data={"csrf": token, "queue": populated.name, "action": "revoke", "id": [done]},
        headers={"accept": "application/json"},
    )
    [result] = r.json()
    assert result["ok"] is False and await _state(populated, done) == "completed"
    page = await client.get("/job", params={"queue": populated.name, "id": done})
    assert 'id="job-revoke"' not in page.text  # a finished job offers no Cancel


@pytest.mark.parametrize(
    ("state", "offered"),
    [
        ("waiting", {"revoke", "remove"}),
        ("delayed", {"promote", "revoke", "remove"}),
        ("failed", {"retry", "remove"}),
        ("dead_letter", {"retry", "remove"}),
        ("completed", {"retry", "remove"}),
    ],
)
async def test_each_tab_offers_only_the_bulk_actions_that_apply(
    populated: Populated, client_for: Any, state: str, offered: set[str]
) -> None:
    client = await client_for(populated)
    page = await client.get("/queue", params={"name": populated.name, "state": state})
    shown = set(re.findall(r'id="bulk-(\w+)"', page.text))
    assert shown == offered, (state, shown)


async def test_the_authorize_hook_decides_each_action_by_name_and_queue(
    populated: Populated, client_for: Any
) -> None:
    asked: list[tuple[str, str]] = []

    async def authorize(request: Any, action: str, queue: str) -> bool:
        asked.append((action, queue))
        return action == "promote"  # this user may promote, nothing else

    client = await client_for(populated, authorize=authorize)
    token = await _token(client, populated)
    done = populated.ids["completed"][0]
    refused = await _post(client, populated, "remove", token, id=[done])
    assert refused.status_code == 403 and "not allowed: remove" in refused.text
    assert await _state(populated, done) == "completed"
    delayed = populated.ids["delayed"][0]
    assert (await _post(client, populated, "promote", token, id=[delayed])).status_code == 303
    assert await _state(populated, delayed) == "waiting"
    assert asked == [("remove", populated.name), ("promote", populated.name)]


async def test_add_a_job_and_duplicate_one_through_the_editor(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    r = await _post(
        client, populated, "add", token,
        name="by-hand", data='{"to": "ada", "n": [1, 2]}', opts='{"attempts": 3, "delay": 60000}',
    )  # fmt: skip
    assert r.status_code == 303
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        [added] = [j for j in await q.get_jobs("delayed") if j.name == "by-hand"]
        assert added.data == {"to": "ada", "n": [1, 2]} and added.max_attempts == 3
        # Duplicate: the queue page's editor comes filled from the job
        page = await client.get("/queue", params={"name": populated.name, "from": added.id})
        assert f"Duplicate job {added.id}" in page.text and 'id="add-job" open' in page.text
        assert "&#34;attempts&#34;: 3" in page.text and "&#34;to&#34;: &#34;ada&#34;" in page.text
        job_page = await client.get("/job", params={"queue": populated.name, "id": added.id})
        assert f"from={added.id}" in job_page.text  # the Duplicate link
    for bad, field in (({"data": "{not json"}, "data"), ({"opts": "[1]"}, "opts"),
                       ({"opts": '{"atempts": 3}'}, "atempts")):  # fmt: skip
        refused = await _post(client, populated, "add", token, name="x", **{"data": "{}", **bad})
        assert refused.status_code == 400 and field in refused.text, (bad, refused.text[:300])


async def test_edit_the_data_of_a_job_that_has_not_started_only(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated)
    waiting = populated.ids["waiting"][0]
    page = await client.get("/job", params={"queue": populated.name, "id": waiting})
    assert 'id="edit-data"' in page.text
    r = await _post(client, populated, "update-data", token, id=[waiting], data='"plain text"')
    assert r.status_code == 303
    done = populated.ids["completed"][0]
    r = await client.post(
        "/action",
        data={"csrf": token, "queue": populated.name, "action": "update-data", "id": [done],
              "data": "{}"},
        headers={"accept": "application/json"},
    )  # fmt: skip
    assert r.json()["ok"] is False and "it is completed" in r.json()["detail"]
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.get_job(waiting)
        assert job is not None and job.data == "plain text"
        finished = await q.get_job(done)
        assert finished is not None and finished.data != {}
    page = await client.get("/job", params={"queue": populated.name, "id": done})
    assert 'id="edit-data"' not in page.text


async def test_the_queue_page_lists_groups_and_pauses_and_resumes_one(
    populated: Populated, client_for: Any
) -> None:
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        await q.add_bulk([("j", i, {"group_key": "acme", "group_weight": 2}) for i in range(3)])
        client = await client_for(populated)
        token = await _token(client, populated)
        page = await client.get("/queue", params={"name": populated.name})
        row = re.search(r'<tr data-group="acme">.*?</tr>', page.text, re.S)
        assert (
            row is not None and "fair x2" in row.group(0) and 'value="pause-group"' in row.group(0)
        )
        r = await _post(client, populated, "pause-group", token, group="acme")
        assert r.status_code == 303
        assert (await q.get_group("acme")).paused  # type: ignore[union-attr]
        page = await client.get(r.headers["location"])
        assert "group acme: paused" in page.text and 'value="resume-group"' in page.text
        await _post(client, populated, "resume-group", token, group="acme")
        assert not (await q.get_group("acme")).paused  # type: ignore[union-attr]
        assert (await _post(client, populated, "pause-group", token)).status_code == 400
