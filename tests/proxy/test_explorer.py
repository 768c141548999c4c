"""The API explorer at /docs: served by the proxy alone (no asset from elsewhere, the same
strict CSP), and in a real browser each route's form sends a real request."""

from __future__ import annotations

import asyncio
import re

import httpx

from glidemq import Queue
from tests.conftest import ValkeyAddress
from tests.dashboard.test_browser import _browser, _wait

from .conftest import running_proxy


async def test_the_explorer_is_self_hosted_under_the_strict_csp(http: httpx.AsyncClient) -> None:
    page = await http.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert set(assets) == {"docs/static/explorer.css", "docs/static/explorer.js", "openapi.json"}
    assert "<script>" not in page.text and "style=" not in page.text  # nothing inline
    for asset in ("docs/static/explorer.js", "docs/static/explorer.css"):
        r = await http.get("/" + asset)
        assert r.status_code == 200, asset
        assert not re.search(r"https?://", r.text), f"{asset} names another server"
    listed = (await http.get("/openapi.json")).json()["paths"]
    assert "get" in listed["/docs"]


def _add_a_job(base: str, queue: str) -> str:
    from selenium.webdriver.common.by import By

    driver = _browser()
    try:
        driver.get(base + "/docs")
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#ops[data-ready]"))
        op = driver.find_element(By.ID, "op-add_job")
        op.find_element(By.TAG_NAME, "summary").click()
        op.find_element(By.NAME, "queue").send_keys(queue)
        body = op.find_element(By.NAME, "__body")
        body.clear()
        body.send_keys('{"name": "from-the-explorer", "data": {"n": 7}}')
        op.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        status = _wait(driver, lambda d: op.find_elements(By.CSS_SELECTOR, "[data-status]"))
        text = str(op.find_element(By.CSS_SELECTOR, "pre.answer").text)
        assert status[0].get_attribute("data-status") == "201", text
        return text
    finally:
        driver.quit()


async def test_in_a_browser_a_route_form_sends_a_real_request(
    valkey_server: ValkeyAddress, prefix: str
) -> None:
    with running_proxy(valkey_server.url, "--prefix", prefix) as (base, _):
        answer = await asyncio.to_thread(_add_a_job, base, "explored")
    async with Queue("explored", connection=valkey_server.url, prefix=prefix) as q:
        jobs = await q.get_jobs("waiting")
        assert [(j.name, j.data) for j in jobs] == [("from-the-explorer", {"n": 7})]
        assert jobs[0].id in answer
        await q.obliterate(force=True)
