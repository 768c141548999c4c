"""Safe by default: every job field is escaped (a job whose data and name are HTML renders as
text), the auth hook and basic auth guard every route, and the dashboard binds 127.0.0.1."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request

from glidemq.errors import ValidationError
from glidemq.web.auth import BasicAuth, hash_password

from .conftest import Populated


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def test_a_job_whose_data_and_name_are_html_renders_as_text(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    xss = populated.ids["xss"][0]
    pages = [
        await client.get("/queue", params={"name": populated.name, "state": "waiting"}),
        await client.get("/queue", params={"name": populated.name, "q": "alert"}),
        await client.get("/job", params={"queue": populated.name, "id": xss}),
    ]
    for page in pages:
        assert page.status_code == 200
        text = page.text
        assert xss in text
        assert "<script>alert(1)" not in text
        assert "<img src=x" not in text
        assert "onerror=alert(2)>" not in text.replace("&gt;", "")  # never a live attribute
        assert "&lt;img src=x onerror=alert(2)&gt;" in text  # the name, shown as text
    job_page = pages[2].text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in job_page  # the data, shown as text


async def test_a_search_text_and_an_error_message_are_escaped(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    r = await client.get("/queue", params={"name": populated.name, "q": "<b>x</b>"})
    assert "<b>x</b>" not in r.text and "&lt;b&gt;x&lt;/b&gt;" in r.text
    r = await client.get("/job", params={"queue": populated.name, "id": "<svg onload=x>"})
    assert r.status_code == 404 and "<svg" not in r.text


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_auth_hook_guards_every_route(
    populated: Populated, client_for: Any, kind: str
) -> None:
    def allow(request: Request) -> bool:
        return request.headers.get("x-team") == "ops"

    async def allow_async(request: Request) -> bool:
        return allow(request)

    client = await client_for(populated, auth=allow if kind == "sync" else allow_async)
    for path in ("/", "/workers", f"/queue?name={populated.name}", "/static/dashboard.js", "/live"):
        assert (await client.get(path)).status_code == 403, path
    assert (await client.post("/action", data={"action": "pause"})).status_code == 403
    r = await client.get("/", headers={"x-team": "ops"})
    assert r.status_code == 200 and populated.name in r.text


async def test_basic_auth_from_a_file_with_plain_and_hashed_passwords(
    populated: Populated, client_for: Any, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"# operators\nann:s3cret\nbob:{hash_password('hunter2')}\n")
    client = await client_for(populated, basic_auth=BasicAuth.from_file(users))
    r = await client.get("/")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
    assert (await client.get("/", headers=_basic("ann", "wrong"))).status_code == 401
    assert (await client.get("/", headers=_basic("eve", "s3cret"))).status_code == 401
    assert (await client.get("/", headers={"Authorization": "Basic !!"})).status_code == 401
    assert (await client.get("/", headers=_basic("ann", "s3cret"))).status_code == 200
    assert (await client.get("/", headers=_basic("bob", "hunter2"))).status_code == 200
    assert (await client.get("/", headers=_basic("bob", "hunter3"))).status_code == 401


def test_a_malformed_or_missing_basic_auth_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("just-a-name\n")
    with pytest.raises(ValidationError, match="bad:1: expected 'user:password'"):
        BasicAuth.from_file(bad)
    with pytest.raises(ValidationError, match="cannot read"):
        BasicAuth.from_file(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    with pytest.raises(ValidationError, match="names no user"):
        BasicAuth.from_file(empty)
