"""The documentation site (mkdocs.yml, `make docs`) builds with `mkdocs build --strict` (no
broken link or anchor, no page left out of the navigation, no missing reference) into a
temporary directory, fetching nothing; every page of docs/ is in the navigation; the README
is the home page and its links lead to pages and files of the site; the search box finds
pages in a real browser from the site's own files; the API reference covers every public
name with its docstring."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import glidemq

yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GENERATED = {"index.md", "changelog.md", "license.md"}  # made by tools/site_hooks.py
REFERENCE_MODULES = ("glidemq.sync", "glidemq.testing", "glidemq.errors")
# Each module of glidemq here gets reference pages when it exists.
LATER_MODULES = ("glidemq.durable",)


def _need_mkdocs() -> None:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module) is None:
            print(f"{module} is missing: install the docs extra (pip install -e '.[docs]')")
            pytest.skip(f"{module} is not installed (the `docs` extra)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for the module with --strict."""
    _need_mkdocs()
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def _config() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert isinstance(data, dict)
    return data


def _nav_files(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [f for item in node for f in _nav_files(item)]
    if isinstance(node, dict):
        return [f for value in node.values() for f in _nav_files(value)]
    return []


class _Page(HTMLParser):
    """The ids and the links of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.assets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.links.append(str(a["href"]))
        for key in ("src", "href"):
            if tag in ("script", "link", "img") and a.get(key):
                self.assets.append(str(a[key]))


_PARSED: dict[Path, _Page] = {}


def _parse(path: Path) -> _Page:
    page = _PARSED.get(path)
    if page is None:
        page = _PARSED[path] = _Page()
        page.feed(path.read_text(errors="replace"))
    return page


def test_every_page_of_docs_is_in_the_navigation() -> None:
    nav = _nav_files(_config()["nav"])
    assert len(nav) == len(set(nav)), "a page twice in the navigation"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - set(nav) == set(), "pages of docs/ missing from mkdocs.yml's nav"
    assert set(nav) - pages - GENERATED == set(), "nav entries with no page"


def test_the_build_fetches_nothing() -> None:
    cfg = _config()
    assert cfg["theme"]["font"] is False  # no font service
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in cfg["plugins"]]
    assert "search" in plugins


def test_the_site_builds_strict_with_no_outside_asset(site: Path) -> None:
    for page in site.rglob("*.html"):
        for url in _parse(page).assets:
            assert not url.startswith(("http://", "https://", "//")), f"{page}: {url}"
        assert "fonts.googleapis" not in page.read_text(errors="replace"), page


def test_every_page_is_built_and_the_search_index_is_there(site: Path) -> None:
    for name in [p.relative_to(DOCS) for p in DOCS.rglob("*.md")]:
        assert (site / name.with_suffix(".html")).is_file(), name
    index = json.loads((site / "search" / "search_index.json").read_text())
    located = {d["location"].split("#")[0] for d in index["docs"]}
    for page in ("index.html", "DEPLOY.html", "reference/queue.html", "USAGE.html"):
        assert page in located, page
    text = " ".join(d["text"] for d in index["docs"] if d["location"].startswith("DEPLOY"))
    assert "glidemq_queue_backlog" in text


def _check_links(site: Path, page: Path) -> list[str]:
    broken = []
    for href in _parse(page).links:
        if href.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if path.endswith("/") or target.is_dir():
            target = target / "index.html"
        if not target.is_file() or (anchor and anchor not in _parse(target).ids):
            broken.append(href)
    return broken


def test_the_readme_is_the_home_page_and_its_links_work(site: Path) -> None:
    home = site / "index.html"
    text = home.read_text()
    assert "Fast, reliable background jobs for Python" in text
    assert _check_links(site, home) == []
    hrefs = set(_parse(home).links)
    readme = (ROOT / "README.md").read_text()
    local = {
        t
        for t in re.findall(r"\]\(([^)\s]+)\)", readme)
        if not t.startswith(("http://", "https://", "#"))
    }
    assert local, "no local link in the README"
    expected = {
        "docs/USAGE.md": "USAGE.html",
        "docs/DEPLOY.md": "DEPLOY.html",
        "CHANGELOG.md": "changelog.html",
        "LICENSE": "license.html",
        "examples/first_job.py": "source/examples/first_job.py.html",
    }
    for source, built in expected.items():
        assert source in local and built in hrefs, source
    assert "img/dashboard-queue.png" in {a for a in _parse(home).assets}


def test_no_page_has_a_broken_link(site: Path) -> None:
    broken = {}
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # served at any path: its links are absolute on purpose
            continue
        found = _check_links(site, page)
        if found:
            broken[page.relative_to(site).as_posix()] = found
    assert broken == {}


def _reference_text() -> str:
    return "\n".join(p.read_text() for p in sorted((DOCS / "reference").glob("*.md")))


def test_the_reference_covers_every_public_name() -> None:
    text = _reference_text()
    named = set(re.findall(r"^::: (glidemq[\w.]*)$", text, re.M))
    in_modules = {n for m in REFERENCE_MODULES for n in importlib.import_module(m).__all__}
    missing = [
        n
        for n in glidemq.__all__
        if n != "__version__" and f"glidemq.{n}" not in named and n not in in_modules
    ]
    assert missing == [], "names of glidemq.__all__ with no `::: glidemq.NAME` in the reference"
    assert set(REFERENCE_MODULES) <= named


@pytest.mark.parametrize("module", LATER_MODULES)
def test_a_module_that_landed_has_its_reference(module: str) -> None:
    """The marked place in mkdocs.yml's nav and reference/index.md: once the module exists,
    the reference must show it."""
    if importlib.util.find_spec(module) is None:
        print(f"{module} does not exist yet: nothing to cover")
        return
    assert f"::: {module}" in _reference_text(), (
        f"{module} exists: add reference/{module.rsplit('.', 1)[1]}.md with `::: {module}` and "
        "its entry where mkdocs.yml's nav marks it"
    )


def test_every_documented_object_and_public_method_has_a_docstring() -> None:
    _need_mkdocs()
    import griffe

    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    package = loader.load("glidemq")
    loader.resolve_aliases(external=False, implicit=True)
    named = set(re.findall(r"^::: glidemq\.([\w.]+)$", _reference_text(), re.M))
    missing: list[str] = []
    for path in sorted(named):
        obj = package[path]
        obj = obj.final_target if obj.is_alias else obj
        members = obj.members if obj.is_module else obj.all_members
        if not obj.docstring:
            missing.append(obj.path)
        for name, member in members.items():
            if name.startswith("_") or (obj.is_module and name not in (obj.exports or ())):
                continue
            target = member.final_target if member.is_alias else member
            if (target.is_function or target.is_class) and not target.docstring:
                missing.append(target.path)
    assert sorted(set(missing)) == []


def _chromium() -> Any:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        print("no chromium / chromedriver: the search box was not tried in a browser")
        pytest.skip("no headless browser (apt-get install -y chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium fetch a browser
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    try:
        return webdriver.Chrome(options=options, service=Service(executable_path=driver))
    except Exception as exc:  # selenium's WebDriverException and OS errors alike
        pytest.skip(f"chromium could not start here: {exc}")


def test_the_search_box_finds_pages_from_the_sites_own_files(site: Path) -> None:
    """Served by a plain static file server, with nothing else reachable: typing in the
    search box lists the pages that hold the word."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = _chromium()
    try:
        browser.set_page_load_timeout(30)
        browser.get(f"http://127.0.0.1:{server.server_port}/index.html")
        browser.find_element(By.CSS_SELECTOR, "label.md-header__button[for='__search']").click()
        browser.find_element(By.CSS_SELECTOR, "input.md-search__input").send_keys("backlog")

        def results(driver: Any) -> list[str]:
            links = driver.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")
            return [str(a.get_attribute("href")) for a in links]

        found = WebDriverWait(browser, 20).until(results)
        assert any("/DEPLOY.html" in href for href in found), found
        assert all(href.startswith(f"http://127.0.0.1:{server.server_port}/") for href in found)
    finally:
        browser.quit()
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None
