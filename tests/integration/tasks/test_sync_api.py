"""`glidemq.sync` as sync code uses it: each scenario is a fresh interpreter (a script, a
thread pool, a coroutine calling sync code, a forked child) talking to the session Valkey,
while this test's own async Worker serves the jobs that need one."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from glidemq import Queue, Worker
from tests.helpers import FAST

ROOT = Path(__file__).resolve().parents[3]


async def run_script(
    body: str, url: str, queue: str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `body` with `URL` and `QUEUE` defined; it prints one JSON object last. Async, so
    this test's own workers go on serving meanwhile."""
    prelude = f"import json, os, sys\nURL = {url!r}\nQUEUE = {queue!r}\n"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        prelude + textwrap.dedent(body),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "GLIDEMQ_URL": url, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the script did not finish within {timeout} s") from None
    stdout, stderr = out.decode(), err.decode()
    assert proc.returncode == 0, f"script failed:\n{stdout}\n{stderr}"
    return dict(json.loads(stdout.strip().splitlines()[-1]))


@pytest.fixture
def url(valkey_server: Any) -> str:
    return str(valkey_server.url)


@pytest.fixture
async def queue(url: str, queue_name: str) -> AsyncIterator[Queue[Any, Any]]:
    """The async side of the scenario's queue (standalone), obliterated afterwards."""
    q: Queue[Any, Any] = Queue(queue_name, connection=url)
    yield q
    try:
        await q.obliterate(force=True)
    finally:
        await q.close()


@pytest.mark.parametrize("direct", ["1", "0"], ids=["direct-add", "add-through-the-loop"])
async def test_queue_and_job_calls_without_an_event_loop(
    url: str, queue: Queue[Any, Any], queue_name: str, direct: str
) -> None:
    out = await run_script(
        """
        from glidemq.sync import Queue
        with Queue(QUEUE, connection=URL) as q:
            job = q.add("send", {"to": "ada"}, {"priority": 2})
            bulk = q.add_bulk([("send", {"i": i}) for i in range(3)])
            same = q.get_job(job.id)
            q.pause()
            paused = q.is_paused()
            q.resume()
            counts = q.get_job_counts()
            waiting = [j.id for j in q.get_jobs(["prioritized", "waiting"])]
            state = same.get_state()
            q.remove(bulk[0].id)
            gone = q.get_job(bulk[0].id) is None
            print(json.dumps({
                "id": job.id, "data": same.data, "name": same.name, "paused": paused,
                "waiting": counts.waiting + counts.prioritized, "listed": sorted(waiting),
                "state": state, "gone": gone, "count": q.count(),
                "prio": same.priority, "repr": repr(same),
            }))
        """,
        url,
        queue_name,
        env={"GLIDEMQ_SYNC_DIRECT": direct},
    )
    assert out["data"] == {"to": "ada"} and out["name"] == "send" and out["prio"] == 2
    assert out["paused"] is True
    assert out["waiting"] == 4 and len(out["listed"]) == 4
    assert out["state"] == "prioritized"
    assert out["gone"] is True and out["count"] == 3
    assert "glidemq.sync.Job" in out["repr"]
    assert await queue.count() == 3  # what the sync API wrote, the async API reads


async def test_add_and_wait_and_result_block_until_a_worker_finished(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    async def double(job: Any) -> int:
        if job.data["n"] < 0:
            raise ValueError("negative")
        return int(job.data["n"]) * 2

    async with Worker(queue_name, double, connection=queue.connection, **FAST):
        out = await run_script(
            """
            from glidemq import JobFailedError
            from glidemq.sync import Queue
            q = Queue(QUEUE, connection=URL)
            value = q.add_and_wait("double", {"n": 21}, timeout=20)
            job = q.add("double", {"n": 5})
            result = job.result(timeout=20)
            bad = q.add("double", {"n": -1})
            try:
                bad.result(timeout=20)
                failed = None
            except JobFailedError as exc:
                failed = str(exc)
            print(json.dumps({"value": value, "result": result, "failed": failed,
                              "state": job.state, "rv": job.returnvalue}))
            """,
            url,
            queue_name,
        )
    assert (out["value"], out["result"], out["rv"]) == (42, 10, 10)
    assert out["state"] == "completed"
    assert "negative" in out["failed"]


async def test_many_threads_share_one_connection(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    out = await run_script(
        """
        import threading
        from concurrent.futures import ThreadPoolExecutor
        from glidemq.sync import Queue
        q = Queue(QUEUE, connection=URL)
        def add(i):
            return q.add("t", {"i": i}).id
        with ThreadPoolExecutor(16) as pool:
            ids = list(pool.map(add, range(400)))
        loops = [t.name for t in threading.enumerate() if t.name == "glidemq-sync"]
        print(json.dumps({"ids": len(set(ids)), "count": q.count(), "loops": len(loops)}))
        """,
        url,
        queue_name,
    )
    assert out == {"ids": 400, "count": 400, "loops": 1}


async def test_sync_calls_inside_a_running_event_loop_do_not_deadlock(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    # A coroutine that blocks in sync code (Jupyter, an async view calling a helper), after
    # the async API opened a client on that very loop: the case that would stop every reply.
    out = await run_script(
        """
        import asyncio
        import glidemq
        from glidemq.sync import Queue as SyncQueue
        async def main():
            async with glidemq.Queue(QUEUE, connection=URL) as aq:
                await aq.add("a", {"n": 1})
                sq = SyncQueue(QUEUE, connection=URL, timeout=10)
                job = sq.add("s", {"n": 2})
                await aq.add("a", {"n": 3})  # the async client still gets its replies
                return job.id, sq.count(), await aq.count()
        first = asyncio.run(main())
        # the loop that created the first client is closed now; the sync API goes on
        after = SyncQueue(QUEUE, connection=URL, timeout=10).count()
        print(json.dumps({"id": first[0], "sync": first[1], "async": first[2], "after": after}))
        """,
        url,
        queue_name,
    )
    assert out["sync"] == 3 and out["async"] == 3 and out["after"] == 3


async def test_a_forked_child_opens_its_own_connection(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    out = await run_script(
        """
        import os
        from glidemq.sync import Queue
        q = Queue(QUEUE, connection=URL, timeout=10)
        parent_job = q.add("p", {"who": "parent"})
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                child = q.add("c", {"who": "child"})
                state = parent_job.get_state()  # a Job read in the parent, used here
                os.write(w, json.dumps({"id": child.id, "state": state}).encode())
                code = 0
            except BaseException as exc:
                os.write(w, json.dumps({"error": repr(exc)}).encode())
                code = 1
            os._exit(code)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        child = json.loads(os.read(r, 65536))
        again = q.add("p", {"who": "parent again"})  # the parent's connection is untouched
        print(json.dumps({"child": child, "status": os.waitstatus_to_exitcode(status),
                          "again": again.id, "count": q.count()}))
        """,
        url,
        queue_name,
    )
    assert out["status"] == 0, out["child"]
    assert out["child"]["state"] == "waiting"
    assert out["count"] == 3


async def test_errors_are_typed_and_a_closed_queue_refuses(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    out = await run_script(
        """
        from glidemq import GlideMQError, JobTimeoutError, ValidationError
        from glidemq.sync import Queue
        q = Queue(QUEUE, connection=URL, timeout=10)
        seen = {}
        try:
            q.add("x", {}, {"atempts": 2})
        except ValidationError as exc:
            seen["option"] = exc.field
        try:
            q.add_and_wait("x", {}, timeout=0.3)  # no worker
        except JobTimeoutError:
            seen["wait"] = "timeout"
        try:
            Queue("bad{name}")
        except ValidationError as exc:
            seen["name"] = type(exc).__name__
        q.close()
        q.close()
        try:
            q.add("x")
        except GlideMQError as exc:
            seen["closed"] = str(exc)
        print(json.dumps(seen))
        """,
        url,
        queue_name,
    )
    assert out["option"] == "atempts"
    assert out["wait"] == "timeout"
    assert out["name"] == "ValidationError"
    assert "closed" in out["closed"]


async def test_a_call_past_its_timeout_raises_operation_timeout(
    url: str, queue: Queue[Any, Any], queue_name: str, valkey_server: Any
) -> None:
    # A server that does not answer in time: pause its clients' writes for a moment.
    script = """
        from glidemq import OperationTimeoutError
        from glidemq.sync import Queue
        import subprocess
        q = Queue(QUEUE, connection=URL, timeout=0.5)
        q.count()
        subprocess.run(CLI + ["CLIENT", "PAUSE", "1500", "WRITE"], check=True,
                       capture_output=True)
        try:
            q.add("late", {})
            outcome, builtin = "added", False
        except OperationTimeoutError as exc:
            outcome = type(exc).__mro__[1].__name__ + ":" + str(exc)
            builtin = isinstance(exc, TimeoutError)
        print(json.dumps({"outcome": outcome, "timeout_error": builtin}))
        """
    from glidemq.server.valkey import valkey_cli_path

    cli = [str(valkey_cli_path()), "-h", valkey_server.host, "-p", str(valkey_server.port)]
    out = await run_script(f"CLI = {cli!r}\n" + textwrap.dedent(script), url, queue_name)
    assert out["outcome"].startswith("GlideMQError:") and "0.5 s" in out["outcome"]
    assert out["timeout_error"] is True


async def test_a_sync_add_after_the_library_was_flushed_reloads_it(
    url: str, queue: Queue[Any, Any], queue_name: str, valkey_server: Any
) -> None:
    # The direct add finds no function on the server: it was not run, so the add goes
    # through the async path, which loads the library again; nothing is added twice.
    from glidemq.server.valkey import valkey_cli_path

    cli = [str(valkey_cli_path()), "-h", valkey_server.host, "-p", str(valkey_server.port)]
    script = """
        import subprocess
        from glidemq.sync import Queue
        q = Queue(QUEUE, connection=URL, timeout=10)
        q.add("a", {})
        q.add("b", {})  # the direct path is warm
        subprocess.run(CLI + ["FUNCTION", "FLUSH"], check=True, capture_output=True)
        job = q.add("c", {"after": "flush"})
        again = q.add("d", {})
        print(json.dumps({"id": job.id, "again": again.id, "count": q.count()}))
        """
    out = await run_script(f"CLI = {cli!r}\n" + textwrap.dedent(script), url, queue_name)
    assert out["count"] == 4
    assert (out["id"], out["again"]) == ("3", "4")


async def test_the_first_add_opens_the_blocking_client_while_it_connects(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    # The first add goes through the sync loop (it connects and checks the library); the
    # blocking client of the adds after it is open when it returns, so the second add does
    # not pay for opening it.
    script = """
        import valkey
        from glidemq.sync import Queue
        q = Queue(QUEUE, connection=URL)
        first = q.add("a", {})
        names = [c["name"] for c in valkey.Valkey.from_url(URL).client_list()]
        second = q.add("b", {})
        print(json.dumps({"ids": [first.id, second.id], "names": names, "count": q.count()}))
        """
    out = await run_script(script, url, queue_name)
    assert out["names"].count(f"glidemq-queue-{queue_name}") == 2  # the loop's and the direct
    assert out["ids"] == ["1", "2"]
    assert out["count"] == 2


async def test_limits_queries_and_a_background_worker_from_sync_code(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    out = await run_script(
        """
        import threading
        from glidemq import sync

        finished = []

        def work(job):
            finished.append(job.id)
            return {"thread": threading.current_thread().name, "n": job.data["n"]}

        with sync.Queue(QUEUE, connection=URL) as q:
            q.set_global_rate_limit(50, 1000)
            q.set_global_concurrency(3)
            limit, conc = q.get_global_rate_limit(), q.get_global_concurrency()
            q.remove_global_rate_limit()
            q.set_global_concurrency(0)
            jobs = [q.add("sq" if n % 2 else "other", {"n": n}) for n in range(6)]
            with sync.Worker(QUEUE, work, connection=URL, concurrency=2) as worker:
                workers = len(q.get_workers())
                results = [j.result(timeout=20) for j in jobs]
            found = sorted(j.data["n"] for j in q.search_jobs("sq", state="completed"))
            print(json.dumps({
                "limit": [limit.max, limit.duration], "conc": conc,
                "after": [q.get_global_rate_limit(), q.get_global_concurrency()],
                "workers": workers, "results": results, "finished": len(finished),
                "found": found, "completed": q.get_job_counts().completed,
                "main": threading.main_thread().name, "dead": len(q.get_dead_letter_jobs()),
            }))
        """,
        url,
        queue_name,
    )
    assert out["limit"] == [50, 1000] and out["conc"] == 3
    assert out["after"] == [None, 0]
    assert out["workers"] == 1
    assert [r["n"] for r in out["results"]] == list(range(6))
    assert all(r["thread"] != out["main"] for r in out["results"])  # ran on worker threads
    assert out["finished"] == 6 and out["completed"] == 6
    assert out["found"] == [1, 3, 5] and out["dead"] == 0


async def test_flows_of_tasks_from_sync_code(
    url: str, queue: Queue[Any, Any], queue_name: str
) -> None:
    out = await run_script(
        """
        import glidemq
        from glidemq import DagNode, sync

        @glidemq.task(QUEUE)
        def step(n: int) -> int:
            return sum(glidemq.current_job().get_children_values().values()) + n

        with sync.Worker(QUEUE, glidemq.task_processor(step), connection=URL, concurrency=4), \\
                sync.FlowProducer(connection=URL) as flows:
            chained = flows.add(glidemq.chain([step.flow_job(n) for n in (1, 2, 3)]))
            bulk = flows.add_bulk([step.flow_job(10), step.flow_job(20)])
            dag = flows.add_dag([
                DagNode("step", QUEUE, {"n": 1}, key="a"),
                DagNode("step", QUEUE, {"n": 2}, key="b", depends_on=["a"]),
            ])
            print(json.dumps({
                "chain": chained.job.result(timeout=20),
                "child": chained.children[0].job.result(timeout=20),
                "bulk": [n.job.result(timeout=20) for n in bulk],
                "dag": dag["b"].result(timeout=20),
                "kind": type(chained.job).__module__,
            }))
        """,
        url,
        queue_name,
    )
    assert out["chain"] == 6 and out["child"] == 3
    assert out["bulk"] == [10, 20] and out["dag"] == 3
    assert out["kind"] == "glidemq.sync.queue"


async def test_groups_from_sync_code(url: str, queue: Queue[Any, Any], queue_name: str) -> None:
    out = await run_script(
        """
        from glidemq import GroupFullError, JobOptions, RateLimit, sync

        with sync.Queue(QUEUE, connection=URL) as q:
            q.add_bulk([("j", n, JobOptions(group_key="t", group_weight=1)) for n in range(4)])
            q.pause_group("t")
            q.set_group_concurrency("t", 2)
            q.set_group_rate_limit("t", RateLimit(10, 1000))
            q.set_max_group_size("t", 4)
            try:
                q.add("j", 9, JobOptions(group_key="t", group_weight=1))
                full = False
            except GroupFullError as exc:
                full = exc.group == "t"
            g = q.get_group("t")
            parked = [j.data for j in q.get_group_jobs("t")]
            q.resume_group("t")
            print(json.dumps({
                "paused": g.paused, "conc": g.concurrency, "rate": g.rate_limit.max,
                "max": g.max_size, "full": full, "parked": parked,
                "keys": [x.key for x in q.get_groups()], "counts": q.get_group_counts("t"),
                "after": q.get_group("t").paused,
            }))
        """,
        url,
        queue_name,
    )
    assert (out["paused"], out["conc"], out["rate"], out["max"]) == (True, 2, 10, 4)
    assert out["full"] and out["parked"] == [1, 2, 3] and out["keys"] == ["t"]
    assert out["counts"] == {"waiting": 4, "parked": 3, "active": 0} and out["after"] is False


async def test_a_sync_handle_tells_the_state_and_result_of_now(
    url: str, queue: Queue[Any, Any]
) -> None:
    """What `.delay` returns reads `state` from the server each time and `returnvalue` once
    the job finished, as a Celery user reads AsyncResult.state; `.get()` names `result()`."""
    result = await run_script(
        """
        import glidemq
        from glidemq import sync

        @glidemq.task(QUEUE)
        def add(x: int, y: int) -> int:
            return x + y

        job = add.delay(2, 3)
        before = (job.state, job.returnvalue)
        try:
            job.get(timeout=10)
            hint = None
        except AttributeError as exc:
            hint = str(exc)
        with sync.Worker(QUEUE, glidemq.task_processor(add), promotion_interval=20):
            deadline = __import__("time").monotonic() + 20
            while job.state != "completed" and __import__("time").monotonic() < deadline:
                pass
            print(json.dumps({"before": before, "after": [job.state, job.returnvalue],
                              "hint": hint}))
        """,
        url,
        queue.name,
    )
    assert result["before"] == ["waiting", None]
    assert result["after"] == ["completed", 5]
    assert "job.result(timeout=10)" in result["hint"]
