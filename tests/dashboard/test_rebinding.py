"""DNS rebinding: a page on another site whose name resolves to 127.0.0.1 sends its own name
as `Host`. The dashboard answers only allowed hosts (the loopback names by default), so it
serves such a page no HTML, no CSRF token, and takes no action from it."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import Queue
from tests.dashboard.conftest import Populated


async def _token(client: Any, populated: Populated, host: str) -> str:
    page = await client.get("/queue", params={"name": populated.name}, headers={"Host": host})
    assert page.status_code == 200
    return str(client.cookies.get("glidemq_csrf"))


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "127.0.0.1.evil.example"])
async def test_a_foreign_host_gets_no_page_and_no_token(
    populated: Populated, client_for: Any, host: str
) -> None:
    client = await client_for(populated)
    for path in ("/", "/workers", f"/queue?name={populated.name}"):
        r = await client.get(path, headers={"Host": host})
        assert r.status_code == 400, (path, r.status_code)
        assert "glidemq_csrf" not in r.headers.get("set-cookie", "")
        assert "csrf" not in r.text


async def test_a_rebound_action_is_refused_and_changes_nothing(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    # The attacker's page got a token on a loopback name earlier: still refused by Host.
    token = await _token(client, populated, "localhost")
    form = {"queue": populated.name, "action": "pause", "csrf": token}
    rebound = {"Host": "evil.example:8080", "Origin": "http://evil.example:8080"}
    r = await client.post("/action", data=form, headers=rebound)
    assert r.status_code == 400
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        assert not await q.is_paused()


async def test_loopback_names_and_their_ports_are_allowed(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    for host in ("localhost", "localhost:8080", "127.0.0.1:9", "[::1]:8080", "LOCALHOST"):
        r = await client.get("/", headers={"Host": host})
        assert r.status_code == 200, host


async def test_allowed_hosts_adds_names_and_patterns(populated: Populated, client_for: Any) -> None:
    client = await client_for(populated, allowed_hosts=["dash.example.com", "*.corp.example"])
    for host, status in [
        ("dash.example.com", 200),
        ("a.corp.example:8080", 200),
        ("corp.example.evil", 400),
        ("evil.example", 400),
        ("localhost", 200),
    ]:
        r = await client.get("/", headers={"Host": host})
        assert r.status_code == status, host


async def test_an_allowed_host_action_from_a_foreign_origin_is_refused(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    token = await _token(client, populated, "localhost")
    form = {"queue": populated.name, "action": "pause", "csrf": token}
    r = await client.post(
        "/action", data=form, headers={"Host": "localhost", "Origin": "http://evil.example"}
    )
    assert r.status_code == 403
    ok = await client.post(
        "/action", data=form, headers={"Host": "localhost", "Origin": "http://localhost"}
    )
    assert ok.status_code in (200, 303), ok.status_code
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        assert await q.is_paused()
        await q.resume()


@pytest.mark.parametrize("bad", [["evil example"], ["a/b"], [""], "localhost"])
async def test_bad_allowed_hosts_are_refused(
    populated: Populated, client_for: Any, bad: Any
) -> None:
    from glidemq import ValidationError

    with pytest.raises(ValidationError, match="allowed_hosts"):
        await client_for(populated, allowed_hosts=bad)
