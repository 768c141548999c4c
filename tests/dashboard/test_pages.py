"""The dashboard's pages, read over ASGI with httpx against a real Valkey: overview, queue
(every state, pagination, search), job, workers, errors, static assets and headers."""

from __future__ import annotations

import html as html_module
import re
from typing import Any

import pytest

from glidemq import Job, Queue, Worker
from tests.helpers import FAST, wait_for

from .conftest import Populated


def _count(html: str, queue: str, state: str) -> int:
    found = re.search(
        rf'data-live-count="{re.escape(queue)}" data-state="{re.escape(state)}">(\d+)<', html
    )
    assert found is not None, f"no {state} count for {queue}"
    return int(found.group(1))


async def test_overview_lists_the_queue_with_counts_per_state_and_paused(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    r = await client.get("/")
    assert r.status_code == 200
    html = r.text
    name = populated.name
    assert f'data-queue="{name}"' in html
    expected = {
        "completed": 3, "failed": 2, "dead_letter": 1, "waiting": 4, "delayed": 1,
        "prioritized": 1, "waiting-children": 1, "active": 0,
    }  # fmt: skip
    for state, n in expected.items():
        assert _count(html, name, state) == n, state
    assert f'data-live-paused="{name}">running<' in html
    assert 'id="chart"' in html and "data-chart=" in html


async def test_queue_page_lists_the_jobs_of_each_state(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    for state in ("completed", "failed", "dead_letter", "waiting", "delayed", "prioritized"):
        r = await client.get("/queue", params={"name": populated.name, "state": state})
        assert r.status_code == 200, (state, r.text[:300])
        listed = set(re.findall(r'data-job-id="([^"]+)"', r.text))
        assert listed == set(populated.ids[state]), state
    r = await client.get("/queue", params={"name": populated.name, "state": "waiting-children"})
    assert set(re.findall(r'data-job-id="([^"]+)"', r.text)) == set(populated.ids["parent"])


async def test_queue_page_shows_schedulers_limits_and_dead_letters(
    populated: Populated, client_for: Any
) -> None:
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        await q.set_global_concurrency(4)
    client = await client_for(populated)
    html = (await client.get("/queue", params={"name": populated.name})).text
    assert "nightly-report" in html and "0 3 * * *" in html
    assert re.search(r"<dt>global concurrency</dt><dd>4</dd>", html)
    assert re.search(r"<dt>dead letters</dt><dd><a [^>]+>1</a></dd>", html)


async def test_queue_page_paginates_by_range(populated: Populated, client_for: Any) -> None:
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        added = await q.add_bulk([("bulk", {"i": i}) for i in range(25)])
    waiting = populated.ids["waiting"] + [j.id for j in added if j is not None]
    client = await client_for(populated)
    seen: list[str] = []
    for page in (1, 2, 3):
        r = await client.get(
            "/queue",
            params={"name": populated.name, "state": "waiting", "size": 10, "page": page},
        )
        assert r.status_code == 200
        seen += re.findall(r'data-job-id="([^"]+)"', r.text)
        assert ('id="next"' in r.text) == (page < 3)
    assert seen == waiting  # in the order they will run, each once
    assert 'of <span id="total">29</span>' in r.text


@pytest.mark.parametrize("by", ["id", "name", "data"])
async def test_search_finds_jobs_by_id_name_or_data_text(
    populated: Populated, client_for: Any, by: str
) -> None:
    client = await client_for(populated)
    text, want = {
        "id": (populated.ids["delayed"][0], populated.ids["delayed"]),
        "name": ("dige", populated.ids["prioritized"]),
        "data": ("LATER1@example", [populated.ids["waiting"][1]]),
    }[by]
    r = await client.get("/queue", params={"name": populated.name, "q": text})
    assert r.status_code == 200
    found = re.findall(r'data-job-id="([^"]+)"', r.text)
    assert found[: len(want)] == want
    if by != "id":
        assert found == want


async def test_job_page_shows_data_logs_progress_result_and_attempts(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    done = populated.ids["completed"][0]
    html = (await client.get("/job", params={"queue": populated.name, "id": done})).text
    assert 'id="job-state">completed<' in html
    assert "user0@example.com" in html  # data and return value
    assert '"sent": "user0@example.com"' in html_module.unescape(html)
    assert "sending to user0@example.com" in html  # the log line
    assert '<progress id="job-progress" max="100" value="100.0">' in html
    failed = populated.ids["failed"][0]
    html = (await client.get("/job", params={"queue": populated.name, "id": failed})).text
    assert 'id="job-state">failed<' in html
    assert "mailbox unavailable" in html
    assert 'id="job-attempts">1 of 1<' in html
    assert 'id="job-stacktrace"' in html and "ValueError" in html
    assert 'id="job-retry"' in html


async def test_job_page_links_flow_parent_and_children(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    parent, child = populated.ids["parent"][0], populated.ids["child"][0]
    html = (await client.get("/job", params={"queue": populated.name, "id": parent})).text
    assert f"/job?queue={populated.name}&amp;id={child}" in html
    html = (await client.get("/job", params={"queue": populated.name, "id": child})).text
    assert f"/job?queue={populated.name}&amp;id={parent}" in html


async def test_workers_page_shows_each_worker_with_queue_host_pid_concurrency(
    populated: Populated, client_for: Any
) -> None:
    import os

    async def idle(job: Job[Any, Any]) -> None:
        return None

    client = await client_for(populated)
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        await q.pause()  # keep the populated jobs where they are
        async with Worker(
            populated.name, idle, connection=populated.url, prefix=populated.prefix,
            concurrency=7, **FAST,
        ):  # fmt: skip
            await wait_for(q.get_workers, timeout=10)
            html = (await client.get("/workers")).text
    row = re.search(
        r'<tr>\s*<td><a href="[^"]+">' + re.escape(populated.name) + r"</a>.*?</tr>", html, re.S
    )
    assert row is not None, html[-2000:]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    assert cells[3] == str(os.getpid()) and cells[4] == "7"
    assert "ago" in cells[-1]


async def test_workers_show_what_they_run_now_and_what_they_finished(
    valkey_server: Any, client_for: Any, queue_name: str
) -> None:
    import asyncio

    from .conftest import Populated as P

    release = asyncio.Event()

    async def slow(job: Job[Any, Any]) -> str:
        if job.name == "slow":
            await release.wait()
        return "ok"

    prefix = "dashw" + queue_name[-8:]
    p = P(valkey_server.url, prefix, queue_name)
    client = await client_for(p)
    async with Queue(queue_name, connection=p.url, prefix=prefix) as q:
        quick = await q.add("quick", 1)
        assert quick is not None
        await q.upsert_job_scheduler("tick", every_ms=3_600_000, template={"name": "quick"})
        await wait_for(lambda: _overdue(client, queue_name), timeout=10)  # no worker yet
        async with Worker(queue_name, slow, connection=p.url, prefix=prefix, concurrency=2, **FAST):
            await quick.wait_until_finished(timeout=10)
            busy = await q.add("slow", 2)
            assert busy is not None

            async def seen() -> bool:
                [w] = await q.get_workers()
                return busy.id in w.running and w.completed >= 2  # quick and the tick's job

            await wait_for(seen, timeout=20)
            html = (await client.get("/workers")).text
            queue_page = (await client.get("/queue", params={"name": queue_name})).text
            release.set()
        await q.obliterate(force=True)
    running = re.search(r'<td class="running"[^>]*>(.*?)</td>', html, re.S)
    assert running is not None and f">{busy.id}</a>" in running.group(1)
    assert "overdue" not in queue_page  # a worker serves it now


async def _overdue(client: Any, queue: str) -> bool:
    page = (await client.get("/queue", params={"name": queue})).text
    return "overdue: no worker serves this queue" in page


async def test_unknown_queue_or_job_is_404_and_bad_input_400(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    r = await client.get("/queue", params={"name": "no-such-queue"})
    assert r.status_code == 404 and "no-such-queue" in r.text
    r = await client.get("/job", params={"queue": populated.name, "id": "999999"})
    assert r.status_code == 404
    r = await client.get("/queue", params={"name": populated.name, "state": "bogus"})
    assert r.status_code == 400
    r = await client.get("/queue", params={"name": populated.name, "page": "x"})
    assert r.status_code == 400
    r = await client.get("/queue", params={"name": "a{b}"})
    assert r.status_code == 400


async def test_assets_ship_in_the_package_and_pages_carry_security_headers(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    r = await client.get("/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    for src in re.findall(r'(?:src|href)="(/static/[^"]+)"', r.text):
        asset = await client.get(src)
        assert asset.status_code == 200, src
    assert "http://" not in re.sub(r"http://www\.w3\.org/2000/svg", "", r.text)
    assert "https://" not in r.text
    js = (await client.get("/static/dashboard.js")).text
    assert "innerHTML = html" in js and "EventSource" in js


async def test_mounted_under_a_path_every_link_asset_and_action_stays_under_it(
    populated: Populated,
) -> None:
    import httpx
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from glidemq.dashboard import create_app

    from .conftest import csrf_of

    dashboard = create_app(populated.url, prefix=populated.prefix, names_ttl=0)
    host = Starlette(routes=[Mount("/ops/queues", app=dashboard)])
    transport = httpx.ASGITransport(app=host)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            home = await client.get("/ops/queues/")
            assert home.status_code == 200
            links = re.findall(r'(?:href|src|action)="([^"#]+)"', home.text)
            assert links and all(u.startswith("/ops/queues/") for u in links), links
            page = await client.get(
                "/ops/queues/queue", params={"name": populated.name, "state": "failed"}
            )
            assert "/ops/queues/static/dashboard.js" in page.text
            assert (await client.get("/ops/queues/static/dashboard.js")).status_code == 200
            r = await client.post(
                "/ops/queues/action",
                data={"csrf": csrf_of(page.text), "queue": populated.name, "action": "pause"},
            )
            assert r.status_code == 303
            assert r.headers["location"] == f"/ops/queues/queue?name={populated.name}"
    finally:
        await dashboard.state.dashboard.close()
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        assert await q.is_paused()


@pytest.mark.cluster
async def test_overview_queue_and_job_pages_on_a_cluster(
    valkey_cluster: Any, client_for: Any
) -> None:
    import uuid

    from glidemq import ConnectionOptions

    from .conftest import populate

    conn = ConnectionOptions(addresses=tuple(valkey_cluster.addresses), cluster=True)
    p = await populate(conn, f"dashc{uuid.uuid4().hex[:8]}")
    client = await client_for(p)
    html = (await client.get("/")).text
    assert _count(html, p.name, "failed") == 2 and _count(html, p.name, "completed") == 3
    r = await client.get("/queue", params={"name": p.name, "state": "failed"})
    assert set(re.findall(r'data-job-id="([^"]+)"', r.text)) == set(p.ids["failed"])
    r = await client.get("/job", params={"queue": p.name, "id": p.ids["failed"][0]})
    assert 'id="job-state">failed<' in r.text


async def test_a_running_job_shows_as_active_with_no_action_that_would_touch_it(
    populated: Populated, client_for: Any
) -> None:
    import asyncio

    release = asyncio.Event()
    started: list[str] = []

    async def hold(job: Job[Any, Any]) -> None:
        started.append(job.id)
        await job.update_progress({"step": "render", "of": 3})
        await release.wait()

    client = await client_for(populated)
    async with Worker(
        populated.name, hold, connection=populated.url, prefix=populated.prefix, **FAST
    ):
        await wait_for(lambda: started, timeout=20)
        job_id = started[0]
        html = (await client.get("/")).text
        assert _count(html, populated.name, "active") == 1
        r = await client.get("/queue", params={"name": populated.name, "state": "active"})
        assert re.findall(r'data-job-id="([^"]+)"', r.text) == [job_id]
        r = await client.get("/job", params={"queue": populated.name, "id": job_id})
        assert 'id="job-state">active<' in r.text
        assert "&#34;step&#34;: &#34;render&#34;" in r.text  # a progress object, as JSON text
        for action in ("job-retry", "job-remove", "job-promote", "job-priority"):
            assert f'id="{action}"' not in r.text
        release.set()


async def test_fragments_render_only_the_parts_live_updates_replace(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    r = await client.get(
        "/queue", params={"name": populated.name, "state": "failed", "fragment": "jobs"}
    )
    assert r.status_code == 200 and "<html" not in r.text and 'id="job-table"' in r.text
    r = await client.get(
        "/job",
        params={"queue": populated.name, "id": populated.ids["failed"][0], "fragment": "detail"},
    )
    assert r.status_code == 200 and "<html" not in r.text and 'id="job-state"' in r.text


async def test_the_live_snapshot_of_a_job_page_carries_the_job(
    populated: Populated, client_for: Any
) -> None:
    from glidemq.dashboard.live import snapshot

    client = await client_for(populated)
    await client.get("/")  # the dashboard connects on first use
    dash = client._transport.app.state.dashboard  # type: ignore[attr-defined]
    snap = await snapshot(dash, populated.name, populated.ids["failed"][0])
    assert snap["job"]["state"] == "failed" and snap["job"]["attempts_made"] == 1
    assert snap["queues"][populated.name]["counts"]["failed"] == 2
    gone = await snapshot(dash, populated.name, "no-such-job")
    assert gone["job"] is None
    everything = await snapshot(dash, None, None)
    assert populated.name in everything["queues"] and "job" not in everything


async def test_jobs_waiting_for_their_group_are_listed_under_group_waiting(
    populated: Populated, client_for: Any
) -> None:
    import asyncio

    from glidemq import JobOptions

    release = asyncio.Event()

    async def hold(job: Job[Any, Any]) -> None:
        await release.wait()

    name = "grouped"
    client = await client_for(populated)
    async with Queue(name, connection=populated.url, prefix=populated.prefix) as q:
        opts = JobOptions(group_key="acme", group_concurrency=1)
        await q.add_bulk([("sync", n, opts) for n in range(3)])
        async with Worker(
            name, hold, connection=populated.url, prefix=populated.prefix, concurrency=5, **FAST
        ):
            counts = await wait_for(
                lambda: _when(q.get_job_counts(), lambda c: c.group_waiting >= 1), timeout=20
            )
            html = (await client.get("/")).text
            assert _count(html, name, "group-waiting") == counts.group_waiting
            r = await client.get("/queue", params={"name": name, "state": "group-waiting"})
            rows = re.findall(r'data-job-id="([^"]+)"', r.text)
            assert len(rows) == counts.group_waiting
            assert r.text.count('<span class="badge state-group-waiting">') == len(rows)
            release.set()


async def _when(value: Any, test: Any) -> Any:
    got = await value
    return got if test(got) else None


async def test_a_job_id_with_slashes_spaces_and_url_characters_links_to_its_page(
    populated: Populated, client_for: Any
) -> None:
    odd = "report/2026 Q4?x=1&y=#2"
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        await q.add("report", {"q": 4}, {"job_id": odd})
    client = await client_for(populated)
    r = await client.get("/queue", params={"name": populated.name, "state": "waiting"})
    links = re.findall(r'<a class="job-link" href="([^"]+)">([^<]+)</a>', r.text)
    href = next(h for h, text in links if html_module.unescape(text) == odd)
    page = await client.get(html_module.unescape(href))
    assert page.status_code == 200
    assert f'id="job-id">{html_module.escape(odd, quote=False)}<' in page.text


@pytest.mark.parametrize(
    ("progress", "bar"),
    [
        (40, 40.0),
        (150, 100.0),
        ({"percent": 25, "stage": "upload"}, 25.0),
        ({"done": 3, "total": 12}, 25.0),
        ({"step": 1, "steps": 4}, 25.0),
        ({"done": 3, "total": 0}, None),
        ({"stage": "upload"}, None),
        (True, None),
        ("50", None),
        (float("nan"), None),
    ],
)
def test_progress_shows_the_numeric_part_of_an_object_as_a_bar(progress: Any, bar: Any) -> None:
    from glidemq.dashboard.format import percent

    assert percent(progress) == bar


async def test_a_job_page_draws_a_bar_for_progress_given_as_an_object(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.add("upload", {"f": "a.bin"})
        assert job is not None
        await job.update_progress({"done": 3, "total": 4, "stage": "upload"})
    page = (await client.get("/job", params={"queue": populated.name, "id": job.id})).text
    assert 'id="job-progress" max="100" value="75.0"' in page
    assert re.search(r"&#34;stage&#34;: &#34;upload&#34;", page), "the object is shown too"


def test_the_timeline_says_what_happened_and_folds_progress_runs() -> None:
    from glidemq.dashboard.timeline import rows_of
    from glidemq.events import QueueEvent

    events = [
        QueueEvent("1000-0", "added", "7", {"name": "resize"}),
        QueueEvent("1001-0", "active", "7"),
        *(QueueEvent(f"{1002 + i}-0", "progress", "7", {"data": str(i * 10)}) for i in range(25)),
        QueueEvent("1030-0", "retrying", "7", {"failedReason": "boom", "attemptsMade": "1"}),
        QueueEvent("1031-0", "active", "7"),
        QueueEvent("1040-0", "completed", "7", {"returnvalue": '"ok"'}),
    ]
    rows = rows_of(events)
    assert [(r.what, r.count) for r in rows] == [
        ("added", 1), ("started", 1), ("progress", 25), ("try 1 failed, will retry", 1),
        ("started", 1), ("completed", 1),
    ]  # fmt: skip
    assert rows[2].detail == "240" and rows[2].at == 1026  # the last of the run
    assert rows[3].detail == "boom" and rows[5].detail == 'returned "ok"'


async def test_a_job_page_timeline_has_no_raw_stream_ids(
    populated: Populated, client_for: Any
) -> None:
    client = await client_for(populated)
    async with Queue(populated.name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.add("long", {})
        assert job is not None
        for pct in range(0, 100, 5):
            await job.update_progress(pct)
    page = (await client.get("/job", params={"queue": populated.name, "id": job.id})).text
    timeline = re.search(r'<ol class="timeline" id="timeline">(.*?)</ol>', page, re.S)
    assert timeline is not None
    assert len(re.findall(r'class="event event-progress"', timeline.group(1))) == 1
    assert "&times;20, the last" in timeline.group(1)
    assert not re.search(r"\d{13}-\d+", timeline.group(1)), "a raw stream id is shown"


async def test_a_job_page_shows_its_whole_flow_tree_with_each_state(
    populated: Populated, client_for: Any
) -> None:
    from glidemq import FlowJob, FlowProducer

    client = await client_for(populated)
    name = populated.name
    tree = FlowJob("root", name, children=[
        FlowJob("mid", name, children=[FlowJob("leaf", name), FlowJob("leaf2", name)]),
        FlowJob("side", name),
    ])  # fmt: skip
    async with FlowProducer(connection=populated.url, prefix=populated.prefix) as flows:
        node = await flows.add(tree)
    leaf = node.children[0].children[0].job
    page = (await client.get("/job", params={"queue": name, "id": leaf.id})).text
    section = re.search(r'<section class="flow-tree" id="flow-tree">(.*?)</section>', page, re.S)
    assert section is not None, "no flow tree"
    refs = re.findall(r'data-ref="([^"]+)"', section.group(1))
    everyone = [
        node.job,
        *(c.job for c in node.children),
        *(c.job for c in node.children[0].children),
    ]
    assert refs[0] == f"{name}:{node.job.id}"  # from the root down, though the leaf was asked
    assert sorted(refs) == sorted(f"{name}:{j.id}" for j in everyone)
    mid = node.children[0].job.id
    under_mid = re.search(rf'data-ref="{name}:{mid}">(.*?)</ul>', section.group(1), re.S)
    assert under_mid is not None and f"{name}:{leaf.id}" in under_mid.group(1)
    assert f'current" data-ref="{name}:{leaf.id}"' in section.group(1)
    assert section.group(1).count("badge state-waiting-children") == 2  # root and mid


async def test_a_job_page_shows_each_failed_try_with_its_stacktrace_and_logs(
    populated: Populated, client_for: Any
) -> None:
    async def flaky(job: Job[Any, Any]) -> str:
        await job.log(f"line of try {job.attempts_made + 1}")
        if job.attempts_made < 2:
            raise ValueError(f"boom in try {job.attempts_made + 1}")
        return "done"

    client = await client_for(populated)
    name = f"{populated.name}-tries"
    async with Queue(name, connection=populated.url, prefix=populated.prefix) as q:
        job = await q.add("flaky", {}, {"attempts": 3})
        assert job is not None
        async with Worker(name, flaky, connection=populated.url, prefix=populated.prefix, **FAST):
            assert await job.wait_until_finished(timeout=20) == "completed"
        stored = await q.get_job(job.id)
        assert stored is not None
        assert [(f["attempt"], f["reason"], f["logs"]) for f in stored.failures] == [
            (1, "boom in try 1", 1), (2, "boom in try 2", 2),
        ]  # fmt: skip
        page = (await client.get("/job", params={"queue": name, "id": job.id})).text
        await q.obliterate(force=True)
    for n in (1, 2):
        block = re.search(rf'<details class="try" id="try-{n}".*?</details>', page, re.S)
        assert block is not None, f"no try {n}"
        text = html_module.unescape(block.group(0))
        assert f"boom in try {n}" in text and "ValueError" in text  # reason and stacktrace
        assert f"line of try {n}" in text and f"line of try {3 - n}" not in text  # its own logs


async def test_a_workflows_job_page_lists_its_steps(
    valkey_server: Any, client_for: Any, queue_name: str
) -> None:
    from tests.durable_sample import run_sample

    prefix = f"dash{queue_name[-8:]}"
    runs = await run_sample(valkey_server.url, queue_name, prefix)
    client = await client_for(Populated(valkey_server.url, prefix, queue_name))
    html = (await client.get("/job", params={"queue": queue_name, "id": runs.waiting})).text
    assert 'id="workflow-steps"' in html
    rows = re.findall(
        r'<tr class="step step-(\w+)" id="step-(\d+)">\s*<td>\d+</td>\s*'
        r'<td class="mono">([^<]+)</td>',
        html,
    )
    assert rows == [("done", "1", "charge"), ("done", "2", "square"), ("waiting", "3", "shipped")]
    assert '{ "cents": 400 }' in html_module.unescape(html)  # the step's result
    done = (await client.get("/job", params={"queue": queue_name, "id": runs.done})).text
    assert re.findall(r'<tr class="step step-(\w+)"', done) == ["done"] * 4
    assert "9</td>" in done and "dhl" in done


async def test_a_plain_job_page_has_no_steps(populated: Populated, client_for: Any) -> None:
    client = await client_for(populated)
    done = populated.ids["completed"][0]
    html = (await client.get("/job", params={"queue": populated.name, "id": done})).text
    assert 'id="workflow-steps"' not in html
