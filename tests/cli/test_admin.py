"""The `glidemq` admin command: every command run for real (the console script in a
subprocess) against the session's Valkey; `--json` output is parsed and checked."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from glidemq import FlowJob, FlowProducer, Job, Queue, UnrecoverableError, Worker
from tests.conftest import ValkeyAddress
from tests.helpers import FAST, wait_for

from .conftest import REPO_ROOT, cli_env

SCRIPT = REPO_ROOT / ".venv" / "bin" / "glidemq"


def _argv() -> list[str]:
    if SCRIPT.exists():
        return [str(SCRIPT)]
    return [sys.executable, "-m", "glidemq.admin.cli"]


def run(url: str, *args: str | int, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`glidemq ARGS` with GLIDEMQ_URL=url; its exit code and output."""
    return subprocess.run(
        [*_argv(), *(str(a) for a in args)],
        cwd=REPO_ROOT,
        env=cli_env({"GLIDEMQ_URL": url}),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


Runner = Callable[..., Any]


@pytest.fixture
def glidemq(valkey_server: ValkeyAddress) -> Runner:
    """Run `glidemq ARGS` in a thread (the event loop keeps serving workers meanwhile)."""

    async def call(*args: str | int, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(run, valkey_server.url, *args, stdin=stdin)

    return call


async def as_json(glidemq: Runner, *args: str | int) -> Any:
    done = await glidemq(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
async def queue(valkey_server: ValkeyAddress, queue_name: str) -> AsyncIterator[Queue[Any, Any]]:
    q: Queue[Any, Any] = Queue(queue_name, connection=valkey_server.url)
    await q._context()
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()


async def _process(queue: Queue[Any, Any], url: str, total: int, dead_letter: bool = False) -> None:
    """Run a worker until `total` jobs finished: 'bad' jobs fail, 'dead' ones fail for good
    (into the dead-letter queue with `dead_letter`), the others complete."""

    async def proc(job: Job[Any, Any]) -> Any:
        await job.log(f"working on {job.id}")
        await job.update_progress(50)
        if job.name == "bad":
            raise ValueError(f"boom {job.id}")
        if job.name == "dead":
            raise UnrecoverableError("dead on arrival")
        return {"done": job.id}

    async with Worker(queue.name, proc, connection=url, dead_letter=dead_letter, **FAST):

        async def finished() -> bool:
            c = await queue.get_job_counts()
            return c.completed + c.failed + c.dead_letter >= total

        await wait_for(finished, timeout=30)


# -- reading ---------------------------------------------------------------------------------


async def test_queues_lists_every_queue_with_counts_paused_and_workers(
    glidemq: Runner, valkey_server: ValkeyAddress
) -> None:
    prefix = f"adm{uuid.uuid4().hex[:8]}"
    url = valkey_server.url
    async with (
        Queue("alpha", connection=url, prefix=prefix) as alpha,
        Queue("beta", connection=url, prefix=prefix) as beta,
    ):
        await alpha.add_bulk([("a", i) for i in range(3)])
        await beta.add("b", 1, {"delay": 600_000})
        await beta.pause()

        async def idle(job: Job[Any, Any]) -> None:
            return None

        async with Worker("beta", idle, connection=url, prefix=prefix, **FAST):
            await wait_for(lambda: beta.get_workers(), timeout=10)
            rows = await as_json(glidemq, "queues", "--prefix", prefix)
            table = await glidemq("--prefix", prefix, "queues")
        assert [r["name"] for r in rows] == ["alpha", "beta"]
        by = {r["name"]: r for r in rows}
        assert by["alpha"]["counts"]["waiting"] == 3
        assert (by["alpha"]["paused"], by["alpha"]["workers"]) == (False, 0)
        assert by["beta"]["counts"]["delayed"] == 1
        assert (by["beta"]["paused"], by["beta"]["workers"]) == (True, 1)
        lines = table.stdout.splitlines()
        assert lines[0].split()[:3] == ["QUEUE", "WAITING", "ACTIVE"]
        assert lines[1].split()[:2] == ["alpha", "3"] and "no" in lines[1].split()
        assert lines[2].split()[0] == "beta" and "yes" in lines[2].split()
        await alpha.obliterate(force=True)
        await beta.obliterate(force=True)


async def test_status_shows_counts_workers_throughput_limits_and_schedulers(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    await queue.add_bulk([("ok", i) for i in range(4)] + [("bad", 0, {"attempts": 1})])
    await _process(queue, valkey_server.url, 5)
    await queue.set_global_rate_limit(100, 1000)
    await queue.set_max_waiting(500)
    await queue.upsert_job_scheduler("tick", cron="0 3 * * *", template={"name": "t"})

    async def idle(job: Job[Any, Any]) -> None:
        return None

    async with Worker(queue.name, idle, connection=valkey_server.url, concurrency=7, **FAST):
        await wait_for(lambda: queue.get_workers(), timeout=10)
        status = await as_json(glidemq, "status", queue.name)
        text = (await glidemq("status", queue.name)).stdout
    assert status["name"] == queue.name
    assert status["counts"]["completed"] == 4 and status["counts"]["failed"] == 1
    assert sum(status["completed"]["counts"]) == 4 and sum(status["failed"]["counts"]) == 1
    assert len(status["completed"]["counts"]) == 60
    (worker,) = status["workers"]
    assert worker["concurrency"] == 7
    assert status["now"] - worker["last_heartbeat"] < 60_000
    assert status["limits"] == {
        "rate_limit": {"max": 100, "duration": 1000},
        "global_concurrency": 0,
        "max_waiting": 500,
    }
    assert [s["name"] for s in status["schedulers"]] == ["tick"]
    assert status["dead_letter"] == 0
    assert f"queue {queue.name}" in text
    assert re.search(r"^completed: \d this minute, \d in 15 min, 4 in 60 min$", text, re.M)
    assert "rate 100 per 1000 ms" in text and "max waiting 500" in text
    assert "workers (1):" in text and "tick" in text


async def test_jobs_pages_a_state_and_searches_names(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    await queue.add_bulk(
        [("bad", i, {"attempts": 1}) for i in range(5)] + [("welcome-mail", 1), ("ok", 2)]
    )
    await _process(queue, valkey_server.url, 7)
    page = await as_json(glidemq, "jobs", queue.name, "--state", "failed", "--limit", 2)
    assert page["total"] == 5 and page["more"] is True
    assert len(page["jobs"]) == 2
    assert {j["state"] for j in page["jobs"]} == {"failed"}
    assert all(j["failed_reason"].startswith("boom") for j in page["jobs"])
    second = await as_json(
        glidemq, "jobs", queue.name, "--state", "failed", "--limit", 2, "--offset", 2
    )
    assert not {j["id"] for j in page["jobs"]} & {j["id"] for j in second["jobs"]}
    found = await as_json(glidemq, "jobs", queue.name, "--search", "welcome")
    assert [j["name"] for j in found["jobs"]] == ["welcome-mail"]
    glob = await as_json(glidemq, "jobs", queue.name, "--search", "o*")
    assert [j["name"] for j in glob["jobs"]] == ["ok"]
    text = (await glidemq("jobs", queue.name, "--state", "failed", "--limit", 2)).stdout
    assert text.splitlines()[0].split()[:3] == ["ID", "NAME", "STATE"]
    assert "(jobs 1-2 of 5; next page: --offset 2)" in text


async def test_job_shows_fields_logs_progress_stacktrace_and_flow_links(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    failed = await queue.add("bad", {"n": 1}, {"attempts": 1})
    assert failed is not None
    await _process(queue, valkey_server.url, 1)
    detail = await as_json(glidemq, "job", queue.name, failed.id)
    assert (detail["id"], detail["name"], detail["state"]) == (failed.id, "bad", "failed")
    assert detail["data"] == {"n": 1} and detail["progress"] == 50
    assert detail["failed_reason"] == f"boom {failed.id}"
    assert "ValueError" in detail["stacktrace"]
    assert detail["logs"] == [f"working on {failed.id}"] and detail["log_count"] == 1
    assert detail["fields"]["failedReason"] == f"boom {failed.id}"
    assert {"id", "name", "state", "timestamp", "attemptsMade"} <= detail["fields"].keys()
    text = (await glidemq("job", queue.name, failed.id)).stdout
    assert "stacktrace:" in text and "logs (1 lines):" in text and "working on" in text

    async with FlowProducer(connection=valkey_server.url) as flows:
        node = await flows.add(
            FlowJob(
                name="parent",
                queue_name=queue.name,
                children=[FlowJob(name="child", queue_name=queue.name, data=i) for i in (1, 2)],
            )
        )
    parent = await as_json(glidemq, "job", queue.name, node.job.id)
    assert parent["state"] == "waiting-children"
    children = {c.job.id for c in node.children}
    assert {c["id"] for c in parent["children_pending"]} == children
    child = await as_json(glidemq, "job", queue.name, node.children[0].job.id)
    assert child["parents"] == [{"queue": queue.name, "id": node.job.id}]


async def test_schedulers_lists_every_scheduler(glidemq: Runner, queue: Queue[Any, Any]) -> None:
    await queue.upsert_job_scheduler("nightly", cron="0 3 * * *", template={"name": "report"})
    await queue.upsert_job_scheduler("often", every_ms=5000)
    rows = await as_json(glidemq, "schedulers", queue.name)
    assert {r["name"] for r in rows} == {"nightly", "often"}
    nightly = next(r for r in rows if r["name"] == "nightly")
    assert nightly["cron"] == "0 3 * * *" and nightly["template"]["name"] == "report"
    text = (await glidemq("schedulers", queue.name)).stdout
    assert "cron 0 3 * * *" in text and "every 5000 ms" in text


async def test_events_shows_recent_ones_and_follows_new_ones(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    first = await queue.add("one", 1)
    assert first is not None
    recent = await as_json(glidemq, "events", queue.name, "--count", 5)
    assert [(e["event"], e["job_id"]) for e in recent] == [("added", first.id)]
    follow = subprocess.Popen(  # noqa: ASYNC220 - a live tail that runs beside the test
        [*_argv(), "events", queue.name, "--follow", "--json"],
        cwd=REPO_ROOT,
        env=cli_env({"GLIDEMQ_URL": valkey_server.url}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stderr is not None  # the tail starts from "now": wait until it runs
        started = await asyncio.wait_for(asyncio.to_thread(follow.stderr.readline), 30)
        assert started.startswith(f"following events of {queue.name!r}")
        second = await queue.add("two", 2)
        assert second is not None
        assert follow.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(follow.stdout.readline), 30)
        event = json.loads(line)
        assert (event["event"], event["job_id"]) == ("added", second.id)
        follow.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(follow.wait, 20) == 0
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(10)


# -- acting ----------------------------------------------------------------------------------


async def test_retry_by_id_and_by_state(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    jobs = await queue.add_bulk([("bad", i, {"attempts": 1}) for i in range(3)] + [("ok", 0)])
    ids = [j.id for j in jobs if j is not None]
    await _process(queue, valkey_server.url, 4)
    await queue.add("dead", 0)
    await _process(queue, valkey_server.url, 5, dead_letter=True)
    counts = await queue.get_job_counts()
    assert (counts.failed, counts.dead_letter, counts.completed) == (3, 1, 1)
    mixed = await glidemq("retry", queue.name, ids[0], "nope", "--json")
    assert mixed.returncode == 2  # one of the jobs could not be retried
    one = json.loads(mixed.stdout)
    assert [(r["id"], r["ok"]) for r in one] == [(ids[0], True), ("nope", False)]
    done = await glidemq("retry", queue.name, ids[1])
    assert done.returncode == 0 and done.stdout.strip() == f"retried {ids[1]} (was failed)"
    counts = await queue.get_job_counts()
    assert (counts.failed, counts.waiting) == (1, 2)
    bulk = await as_json(glidemq, "retry", queue.name, "--state", "failed")
    assert bulk == {"queue": queue.name, "action": "retry", "count": 1, "ids": []}
    dlq = await as_json(glidemq, "retry", queue.name, "--state", "dead_letter")
    assert dlq["count"] == 1
    counts = await queue.get_job_counts()
    assert (counts.failed, counts.dead_letter, counts.waiting) == (0, 0, 4)
    missing = await glidemq("retry", queue.name, "nope")
    assert (missing.returncode, missing.stdout) == (2, "not retried nope: not found\n")


async def test_remove_asks_for_yes_then_removes(glidemq: Runner, queue: Queue[Any, Any]) -> None:
    job = await queue.add("x", 1)
    assert job is not None
    refused = await glidemq("remove", queue.name, job.id)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"glidemq: error: remove 1 job(s) of {queue.name!r}: pass --yes to confirm"
    )
    assert await queue.get_job(job.id) is not None
    results = await as_json(glidemq, "remove", queue.name, job.id, "--yes")
    assert results == [
        {"queue": queue.name, "action": "remove", "id": job.id, "ok": True, "detail": ""}
    ]
    assert await queue.get_job(job.id) is None


async def test_promote_makes_delayed_jobs_runnable(glidemq: Runner, queue: Queue[Any, Any]) -> None:
    later = await queue.add("later", 1, {"delay": 3_600_000})
    now = await queue.add("now", 2)
    assert later is not None and now is not None
    done = await glidemq("promote", queue.name, later.id, now.id, "--json")
    assert done.returncode == 2  # one of them was not delayed
    results = json.loads(done.stdout)
    assert [(r["id"], r["ok"]) for r in results] == [(later.id, True), (now.id, False)]
    assert "only delayed jobs" in results[1]["detail"]
    assert (await queue.get_job_counts()).delayed == 0
    assert await later.get_state() == "waiting"


async def test_revoke_cancels_jobs_that_have_not_finished(
    glidemq: Runner, queue: Queue[Any, Any]
) -> None:
    later = await queue.add("later", 1, {"delay": 3_600_000})
    gone = await queue.add("gone", 2)
    assert later is not None and gone is not None
    await gone.remove()
    done = await glidemq("revoke", queue.name, later.id, gone.id, "--json")
    assert done.returncode == 2  # one of them does not exist
    results = json.loads(done.stdout)
    assert [(r["id"], r["ok"]) for r in results] == [(later.id, True), (gone.id, False)]
    assert results[0]["detail"] == "revoked"
    await later.refresh()
    assert later.state == "failed" and later.failed_reason == "revoked"


async def test_pause_and_resume(glidemq: Runner, queue: Queue[Any, Any]) -> None:
    await queue.add("x", 1)
    paused = await glidemq("pause", queue.name)
    assert (paused.returncode, paused.stdout.strip()) == (0, f"paused {queue.name}")
    assert await queue.is_paused()
    assert (await as_json(glidemq, "resume", queue.name))["action"] == "resume"
    assert not await queue.is_paused()


async def test_groups_lists_groups_and_pauses_and_resumes_one(
    glidemq: Runner, queue: Queue[Any, Any]
) -> None:
    await queue.add_bulk([("j", i, {"group_key": "t1", "group_weight": 2}) for i in range(5)])
    await queue.add("j", 0, {"ordering_key": "o"})
    table = await glidemq("groups", queue.name)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "WAITING", "PARKED", "ACTIVE", "PAUSED", "LIMITS"]
    assert re.match(r"t1\s+5\s+3\s+0\s+no\s+fair x2$", lines[2]), lines
    assert re.match(r"o\s+1\s+0\s+-\s+no\s+ordering key$", lines[1]), lines
    paused = await glidemq("pause-group", queue.name, "t1")
    assert (paused.returncode, paused.stdout.strip()) == (0, f"group 't1' of '{queue.name}' paused")
    assert (await queue.get_group("t1")).paused  # type: ignore[union-attr]
    rows = await as_json(glidemq, "groups", queue.name)
    assert {r["key"]: r["paused"] for r in rows} == {"o": False, "t1": True}
    resumed = await as_json(glidemq, "resume-group", queue.name, "t1")
    assert resumed["key"] == "t1" and resumed["paused"] is False
    bad = await glidemq("pause-group", queue.name, "")
    assert bad.returncode == 2 and "key" in bad.stderr


async def test_pausing_or_resuming_a_group_that_does_not_exist_says_so(
    glidemq: Runner, queue: Queue[Any, Any]
) -> None:
    await queue.add("j", 0, {"group_key": "known"})
    # a typo: the pause still applies (jobs added to it later wait), but it is not silent
    paused = await glidemq("pause-group", queue.name, "knwon")
    assert paused.returncode == 0, paused.stderr
    assert f"queue '{queue.name}' has no group 'knwon' yet" in paused.stderr
    assert "check the name" in paused.stderr
    assert (await queue.get_group("knwon")).paused  # type: ignore[union-attr]
    # a known group: nothing more to say
    quiet = await glidemq("pause-group", queue.name, "known")
    assert quiet.returncode == 0 and quiet.stderr == ""
    resumed = await glidemq("resume-group", queue.name, "never")
    assert resumed.returncode == 0
    assert f"queue '{queue.name}' has no group 'never'" in resumed.stderr
    assert "nothing to resume" in resumed.stderr
    assert await queue.get_group("never") is None  # resuming it made nothing


async def test_clean_removes_old_jobs_of_one_state(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    await queue.add_bulk([("ok", i) for i in range(3)] + [("bad", 0, {"attempts": 1})])
    await _process(queue, valkey_server.url, 4)
    kept = await as_json(
        glidemq, "clean", queue.name, "--state", "completed", "--grace", "1h", "--yes"
    )
    assert kept["count"] == 0  # none is an hour old
    gone = await as_json(
        glidemq, "clean", queue.name, "--state", "completed", "--grace", "0", "--yes"
    )
    assert gone["count"] == 3 and len(gone["ids"]) == 3
    counts = await queue.get_job_counts()
    assert (counts.completed, counts.failed) == (0, 1)
    refused = await glidemq("clean", queue.name, "--state", "failed", "--grace", "0")
    assert refused.returncode == 2 and "pass --yes" in refused.stderr


async def test_drain_removes_waiting_jobs_and_leaves_delayed_ones(
    glidemq: Runner, queue: Queue[Any, Any]
) -> None:
    await queue.add_bulk([("x", i) for i in range(4)])
    await queue.add("later", 0, {"delay": 600_000})
    refused = await glidemq("drain", queue.name)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"glidemq: error: remove the 4 job(s) waiting in {queue.name!r}: pass --yes to confirm"
    )
    done = await as_json(glidemq, "drain", queue.name, "--yes")
    assert done["count"] == 4
    counts = await queue.get_job_counts()
    assert (counts.waiting, counts.delayed) == (0, 1)
    assert (await as_json(glidemq, "drain", queue.name, "--delayed", "--yes"))["count"] == 1


async def test_obliterate_needs_confirmation_and_force_while_jobs_run(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    await queue.add_bulk([("x", i) for i in range(3)])
    refused = await glidemq("obliterate", queue.name)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    started = asyncio.Event()
    release = asyncio.Event()

    async def hold(job: Job[Any, Any]) -> None:
        started.set()
        await release.wait()

    async with Worker(queue.name, hold, connection=valkey_server.url, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 20)
        busy = await glidemq("obliterate", queue.name, "--yes")
        assert busy.returncode == 2
        assert busy.stderr.strip() == (
            f"glidemq: error: queue {queue.name!r} has 1 running job(s): stop its workers, "
            "or pass --force"
        )
        gone = await as_json(glidemq, "obliterate", queue.name, "--force")
        assert gone["action"] == "obliterate" and gone["count"] == 3
        release.set()
        await worker.close()
    missing = await glidemq("status", queue.name)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"glidemq: error: no queue {queue.name!r} under prefix 'glide'"


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "{q}-missing"], "glidemq: error: no queue '{q}-missing' under prefix 'glide'"),
        (["job", "{q}", "999999"], "glidemq: error: job '999999' not found in queue '{q}'"),
        (["jobs", "{q}", "--lim", "3"], "glidemq: error: unrecognized arguments: --lim 3"),
        (
            ["clean", "{q}", "--state", "completed", "--grace", "10", "--yes"],
            "glidemq clean: error: argument --grace: expected a duration with a unit "
            "(500ms, 30s, 10m, 1h, 2d), got '10'",
        ),
        (["retry", "{q}"], "glidemq: error: retry: name job IDs or --state failed|"),
        (["retry", "{q}", "1", "--state", "failed"], "glidemq: error: retry: name job IDs or"),
        (["status", "bad{{name"], "glidemq: error: queue: 'bad{{name' contains a forbidden"),
        (["frobnicate"], None),
    ],
    ids=["unknown-queue", "unknown-job", "abbreviation", "grace-unit", "retry-nothing",
         "retry-both", "bad-name", "unknown-command"],
)  # fmt: skip
async def test_bad_input_exits_2_with_one_line(
    glidemq: Runner, queue: Queue[Any, Any], args: list[str], message: str | None
) -> None:
    await queue.add("x", 1)
    done = await glidemq(*(a.format(q=queue.name) for a in args))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    if message is not None:
        expected = message.format(q=queue.name)
        assert lines[0].startswith(expected), (lines[0], expected)
    assert done.stdout == ""


def test_an_unreachable_server_exits_6_with_one_line() -> None:
    done = run("valkey://127.0.0.1:1", "queues")
    assert done.returncode == 6  # as glidemq-run's ExitCode.UNREACHABLE
    assert done.stderr.strip().splitlines() == [
        "glidemq: error: cannot reach Valkey at valkey://127.0.0.1:1 "
        "(127.0.0.1:1: Connection refused); is a Valkey server running there? Start one with "
        "glidemq-server, or point GLIDEMQ_URL (--url on the command line) at yours"
    ]


async def test_options_go_before_or_after_the_command(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    await queue.add("x", 1)
    before = await glidemq("--json", "--url", valkey_server.url, "status", queue.name)
    after = await glidemq("status", queue.name, "--url", valkey_server.url, "--json")
    assert before.returncode == after.returncode == 0
    assert json.loads(before.stdout)["counts"] == json.loads(after.stdout)["counts"]


@pytest.mark.cluster
async def test_queues_and_jobs_on_a_cluster(valkey_cluster: Any, queue_name: str) -> None:
    prefix = f"adm{uuid.uuid4().hex[:8]}"
    names = [f"{queue_name}-{i}" for i in range(4)]  # spread over the slots
    url = valkey_cluster.url
    for name in names:
        async with Queue(name, connection=url, prefix=prefix) as q:
            await q.add("x", {"q": name})
    done = await asyncio.to_thread(run, url, "queues", "--prefix", prefix, "--json")
    assert done.returncode == 0, done.stderr
    assert [r["name"] for r in json.loads(done.stdout)] == sorted(names)
    page = await asyncio.to_thread(run, url, "jobs", names[2], "--prefix", prefix, "--json")
    assert [j["name"] for j in json.loads(page.stdout)["jobs"]] == ["x"]
    for name in names:
        async with Queue(name, connection=url, prefix=prefix) as q:
            await q.obliterate(force=True)


def test_a_host_that_does_not_exist_fails_at_once_with_the_unreachable_code() -> None:
    done = run("valkey://no-such-host.invalid:6379", "queues")
    assert done.returncode == 6
    assert "no such host 'no-such-host.invalid'" in done.stderr


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["queus"], "(did you mean 'queues'?)"),
        (["jobs", "q", "--stat", "failed"], "(did you mean --state?)"),
        (["clean", "q", "--grace", "1h", "--state", "failed", "--yess"], "(did you mean --yes?)"),
    ],
    ids=["command", "flag", "flag-of-a-command"],
)
def test_a_mistyped_command_or_flag_gets_a_suggestion(args: list[str], hint: str) -> None:
    done = run("valkey://127.0.0.1:1", *args)  # refused before any connection
    assert done.returncode == 2
    assert hint in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_state_names_are_accepted_with_either_separator(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    async def dead(job: Job[Any, Any]) -> None:
        raise UnrecoverableError("no")

    job = await queue.add("x", 1)
    assert job is not None
    async with Worker(queue.name, dead, connection=valkey_server.url, dead_letter=True, **FAST):
        await wait_for(lambda: _dead_letters(queue), timeout=20)
    for spelling in ("dead_letter", "dead-letter"):
        page = await as_json(glidemq, "jobs", queue.name, "--state", spelling)
        assert [j["id"] for j in page["jobs"]] == [job.id], spelling
    children = await as_json(glidemq, "jobs", queue.name, "--state", "waiting_children")
    assert children["jobs"] == []
    assert [j.id for j in await queue.get_jobs("dead-letter")] == [job.id]  # the API too
    retried = await glidemq("retry", queue.name, "--state", "dead-letter")
    assert retried.returncode == 0, retried.stderr


async def _dead_letters(queue: Queue[Any, Any]) -> bool:
    return (await queue.get_job_counts()).dead_letter == 1


async def test_queues_shows_waiting_children(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    from glidemq import FlowJob, FlowProducer

    async with FlowProducer(connection=valkey_server.url) as flows:
        await flows.add(FlowJob("parent", queue.name, children=[FlowJob("kid", queue.name)]))
    table = (await glidemq("queues")).stdout.splitlines()
    header = table[0].split()
    row = next(line.split() for line in table if line.split()[0] == queue.name)
    assert row[header.index("WAITING-CHILDREN")] == "1"


async def test_job_lists_a_workflows_steps(
    glidemq: Runner, queue: Queue[Any, Any], valkey_server: ValkeyAddress
) -> None:
    from tests.durable_sample import run_sample

    runs = await run_sample(valkey_server.url, queue.name)
    detail = await as_json(glidemq, "job", queue.name, runs.done)
    steps = [(s["position"], s["name"], s["kind"], s["status"]) for s in detail["steps"]]
    assert steps == [
        (1, "charge", "step", "done"),
        (2, "square", "child", "done"),
        (3, "shipped", "event", "done"),
        (4, "label", "step", "done"),
    ]
    assert detail["steps"][0]["result"] == {"cents": 300}
    assert detail["steps"][1]["result"] == 9 and detail["steps"][2]["result"] == "dhl"
    assert detail["steps"][0]["attempts"] == 1 and detail["steps"][0]["finished_at"] > 0
    text = (await glidemq("job", queue.name, runs.waiting)).stdout
    assert "steps (3):" in text
    assert re.search(r"^\s+3\s+event shipped\s+waiting\b", text, re.M), text
    assert re.search(r"^\s+1\s+charge\s+done\b.*-> \{\"cents\":400\}", text, re.M), text
