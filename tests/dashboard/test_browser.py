"""A real browser: headless Chromium (Debian's `chromium` and `chromium-driver`) driven by
selenium clicks overview -> queue -> failed job -> retry against `glidemq-dashboard`, and
checks the page changed and the job is waiting again; a live update arrives without a page
reload. Screenshots go to $GLIDEMQ_SCREENSHOTS (default: the test's tmp dir). Skipped with
the reason when the browser or its driver is not installed."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glidemq import Queue
from tests.helpers import wait_for

from .conftest import Populated, running_dashboard

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _browser() -> Any:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip(
            "no headless browser: install Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--window-size=1360,1000", "--force-device-scale-factor=1", "--lang=en-US",
    ):  # fmt: skip
        options.add_argument(arg)
    try:
        return webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    except Exception as exc:  # selenium's WebDriverException and OS errors alike
        pytest.skip(f"chromium could not start here: {exc}")


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = _browser()
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("GLIDEMQ_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _wait(driver: Any, condition: Any, timeout: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def _text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def _click_through(driver: Any, base: str, p: Populated, shots: Path) -> str:
    """Overview -> queue -> failed tab -> first failed job -> Retry; the retried job's id."""
    from selenium.webdriver.common.by import By

    driver.get(base + "/")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart rect"))
    driver.save_screenshot(str(shots / "overview.png"))
    driver.find_element(By.LINK_TEXT, p.name).click()
    _wait(driver, lambda d: _text(d, "#queue-name") == p.name)
    driver.find_element(By.CSS_SELECTOR, 'a.tab[data-state="failed"]').click()
    _wait(driver, lambda d: "current" in d.find_element(
        By.CSS_SELECTOR, 'a.tab[data-state="failed"]').get_attribute("class"))  # fmt: skip
    rows = driver.find_elements(By.CSS_SELECTOR, "#job-table tr.job")
    assert {r.get_attribute("data-job-id") for r in rows} == set(p.ids["failed"])
    driver.save_screenshot(str(shots / "queue-failed.png"))
    link = driver.find_element(By.CSS_SELECTOR, "#job-table a.job-link")
    job_id = str(link.text)
    link.click()
    _wait(driver, lambda d: _text(d, "#job-id") == job_id)
    assert _text(driver, "#job-state") == "failed"
    assert "mailbox unavailable" in _text(driver, "#job-reason")
    driver.save_screenshot(str(shots / "job-failed.png"))
    driver.find_element(By.ID, "job-retry").click()
    _wait(driver, lambda d: d.find_elements(By.ID, "notice"))
    assert _text(driver, "#job-state") == "waiting"
    assert _text(driver, "#notice") == "retry: 1 done"
    assert not driver.find_elements(By.ID, "job-retry")  # a waiting job has no Retry
    driver.save_screenshot(str(shots / "job-retried.png"))
    return job_id


def _live_update(driver: Any, base: str, p: Populated) -> int:
    """Open the overview once the live feed is connected, mark the page (a reload would
    drop the mark), and return the waiting count it shows."""
    driver.get(base + "/")
    _wait(driver, lambda d: _text(d, "#live") and "on" in d.find_element(
        "id", "live").get_attribute("class"))  # fmt: skip
    driver.execute_script("window.__notReloaded = true;")
    return int(_text(driver, f'a[data-live-count="{p.name}"][data-state="waiting"]'))


def _live_after(driver: Any, p: Populated, want: int) -> None:
    from selenium.webdriver.common.by import By

    css = f'a[data-live-count="{p.name}"][data-state="waiting"]'
    _wait(driver, lambda d: _text(d, css) == str(want))
    assert driver.execute_script("return window.__notReloaded === true;")
    assert _text(driver, f'[data-live-paused="{p.name}"]') == "paused"
    assert driver.find_elements(By.CSS_SELECTOR, "#chart rect.bar-completed")


async def test_a_browser_retries_a_failed_job_and_sees_live_updates(
    populated: Populated, browser: Any, shots: Path
) -> None:
    args = ("--prefix", populated.prefix, "--refresh", "0.3")
    with running_dashboard(populated.url, *args) as (base, _):
        job_id = await asyncio.to_thread(_click_through, browser, base, populated, shots)
        async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
            job = await q.get_job(job_id)
            assert job is not None and job.state == "waiting"
            waiting = await asyncio.to_thread(_live_update, browser, base, populated)
            assert waiting == (await q.get_job_counts()).waiting
            await q.pause()
            await q.add("late", {"n": 1})
            await asyncio.to_thread(_live_after, browser, populated, waiting + 1)
    for name in ("overview.png", "queue-failed.png", "job-failed.png", "job-retried.png"):
        assert (shots / name).stat().st_size > 10_000, name
    print(f"screenshots in {shots}")


def _overflow(driver: Any) -> int:
    """How many px the page is wider than the window (0: it fits; tables scroll inside)."""
    return int(
        driver.execute_script(
            "var e = document.documentElement; return e.scrollWidth - e.clientWidth;"
        )
    )


def _narrow_pages(driver: Any, base: str, p: Populated, shots: Path) -> dict[str, int]:
    from urllib.parse import urlencode

    from selenium.webdriver.common.by import By

    driver.set_window_size(400, 900)
    width = int(driver.execute_script("return window.innerWidth;"))
    assert width <= 420, f"the window is {width} px wide, not a narrow screen"
    failed = p.ids["failed"][0]
    pages = {
        "overview": "/",
        "queue": "/queue?" + urlencode({"name": p.name, "state": "delayed"}),
        "job": "/job?" + urlencode({"queue": p.name, "id": failed}),
    }
    out = {}
    for label, path in pages.items():
        driver.get(base + path)
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "main h1"))
        driver.save_screenshot(str(shots / f"narrow-{label}.png"))
        out[label] = _overflow(driver)
    return out


async def test_at_400_px_the_pages_fit_and_only_tables_scroll(
    populated: Populated, browser: Any, shots: Path
) -> None:
    with running_dashboard(populated.url, "--prefix", populated.prefix) as (base, _):
        overflow = await asyncio.to_thread(_narrow_pages, browser, base, populated, shots)
    assert overflow == {"overview": 0, "queue": 0, "job": 0}, overflow


def _add_through_the_editor(driver: Any, base: str, p: Populated) -> str:
    from urllib.parse import urlencode

    from selenium.webdriver.common.by import By

    driver.get(base + "/queue?" + urlencode({"name": p.name}))
    driver.find_element(By.CSS_SELECTOR, "#add-job summary").click()
    driver.find_element(By.ID, "add-name").send_keys("typed")
    data = driver.find_element(By.ID, "add-data")
    data.clear()
    data.send_keys('{"n": 1,')  # not JSON: the browser must not send it
    driver.find_element(By.ID, "add-submit").click()
    error = driver.find_element(By.CSS_SELECTOR, "#add-job .json-error")
    _wait(driver, lambda d: error.is_displayed())
    assert "is not JSON" in error.text and not driver.find_elements(By.ID, "notice")
    data.send_keys(' "m": 2}')
    driver.find_element(By.ID, "add-submit").click()
    _wait(driver, lambda d: d.find_elements(By.ID, "notice"))
    return str(driver.find_element(By.ID, "notice").text)


async def test_the_json_editor_refuses_bad_json_in_the_browser_and_adds_good_json(
    populated: Populated, browser: Any
) -> None:
    with running_dashboard(populated.url, "--prefix", populated.prefix) as (base, _):
        notice = await asyncio.to_thread(_add_through_the_editor, browser, base, populated)
    assert notice.startswith("add ") and notice.endswith(": done"), notice
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        typed = [j for j in await q.get_jobs("waiting") if j.name == "typed"]
        assert [j.data for j in typed] == [{"n": 1, "m": 2}]


def _json_tools(driver: Any, base: str, queue: str, job_id: str) -> tuple[list[str], str]:
    from urllib.parse import urlencode, urlsplit

    from selenium.webdriver.common.by import By

    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
    driver.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": origin, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    driver.get(base + "/job?" + urlencode({"queue": queue, "id": job_id}))
    data = driver.find_element(By.ID, "job-data")
    tools = data.find_element(By.XPATH, "preceding-sibling::div[@class='block-tools']")
    tools.find_element(By.CSS_SELECTOR, "button.as-tree").click()
    view = data.find_element(By.XPATH, "following-sibling::div[contains(@class,'json-tree')]")
    _wait(driver, lambda d: view.is_displayed() and not data.is_displayed())
    keys = [str(k.text) for k in view.find_elements(By.CSS_SELECTOR, ".json-key")]
    tools.find_element(By.CSS_SELECTOR, "button.copy").click()
    _wait(driver, lambda d: tools.find_element(By.CSS_SELECTOR, "button.copy").text != "Copy")
    copied = driver.execute_async_script(
        "var done = arguments[0]; navigator.clipboard.readText().then(done, function (e) "
        "{ done('unreadable: ' + e); });"
    )
    return keys, str(copied)


async def test_json_blocks_have_a_tree_and_a_copy_button(
    populated: Populated, browser: Any
) -> None:
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.add("nested", {"order": {"id": 7, "lines": ["a", "b"]}, "ok": True})
        assert job is not None
    with running_dashboard(populated.url, "--prefix", populated.prefix) as (base, _):
        keys, copied = await asyncio.to_thread(_json_tools, browser, base, populated.name, job.id)
    assert keys[:3] == ['"order":', '"id":', '"lines":'] and '"ok":' in keys, keys
    assert '"lines"' in copied and '"id": 7' in copied, copied


def _cancel_flow_and_workers(
    driver: Any, base: str, p: Populated, delayed: str, leaf: str, busy: str
) -> dict[str, Any]:
    from urllib.parse import urlencode

    from selenium.webdriver.common.by import By

    seen: dict[str, Any] = {}
    # 2. Cancel a delayed job from its page (the confirmation is accepted)
    driver.get(base + "/job?" + urlencode({"queue": p.name, "id": delayed}))
    driver.find_element(By.ID, "job-revoke").click()
    _wait(driver, lambda d: d.switch_to.alert).accept()
    _wait(driver, lambda d: d.find_elements(By.ID, "notice"))
    seen["cancelled"] = _text(driver, "#job-state")
    # 4. The flow tree of a leaf, from its root
    driver.get(base + "/job?" + urlencode({"queue": p.name, "id": leaf}))
    nodes = driver.find_elements(By.CSS_SELECTOR, "#flow-tree li.flow-node")
    seen["flow"] = [n.get_attribute("data-ref") for n in nodes]
    seen["current"] = driver.find_element(
        By.CSS_SELECTOR, "#flow-tree li.flow-node.current"
    ).get_attribute("data-ref")
    # 5. The workers page names the job a worker runs now
    driver.get(base + "/workers")
    cells = driver.find_elements(By.CSS_SELECTOR, "#workers td.running a")
    seen["running"] = [str(c.text) for c in cells]
    seen["busy_link"] = busy in seen["running"]
    return seen


async def test_in_a_browser_cancel_the_flow_tree_and_what_workers_run(
    populated: Populated, browser: Any
) -> None:
    from glidemq import FlowJob, FlowProducer, Job, Worker

    release = asyncio.Event()

    async def hold(job: Job[Any, Any]) -> None:
        await release.wait()

    url, prefix, name = populated.url, populated.prefix, populated.name
    async with FlowProducer(connection=url, prefix=prefix) as flows:
        node = await flows.add(
            FlowJob("top", name, children=[FlowJob("mid", name, children=[FlowJob("leaf", name)])])
        )
    leaf = node.children[0].children[0].job.id
    busy_queue = f"{name}-busy"
    async with Queue(busy_queue, connection=url, prefix=prefix) as q:
        busy = await q.add("hold", {})
        assert busy is not None
        async with Worker(busy_queue, hold, connection=url, prefix=prefix, lock_duration=3000):

            async def running() -> bool:
                return any(busy.id in w.running for w in await q.get_workers())

            await wait_for(running, timeout=20)
            with running_dashboard(url, "--prefix", prefix) as (base, _):
                seen = await asyncio.to_thread(
                    _cancel_flow_and_workers, browser, base, populated,
                    populated.ids["delayed"][0], leaf, busy.id,
                )  # fmt: skip
            release.set()
        await q.obliterate(force=True)
    assert seen["cancelled"] == "failed"
    assert seen["flow"][0] == f"{name}:{node.job.id}" and len(seen["flow"]) == 3
    assert seen["current"] == f"{name}:{leaf}"
    assert seen["busy_link"], seen["running"]
