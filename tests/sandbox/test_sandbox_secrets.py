"""Sandbox children see no Valkey credentials: the fork server and spawned children are
exec'd with an environment without GLIDEMQ_URL and without any variable holding the
connection's password."""

from __future__ import annotations

from typing import Any

import psutil
import pytest

from glidemq import Queue, SandboxOptions, Worker
from tests.helpers import wait_for
from tests.secrets_check import exposed, password_server


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
async def test_children_get_no_credentials_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, queue_name: str, start_method: str
) -> None:
    with password_server() as (server, secret):
        url = f"valkey://:{secret}@{server.host}:{server.port}"
        monkeypatch.setenv("GLIDEMQ_URL", url)  # the Worker's connection comes from here
        monkeypatch.setenv("APP_VALKEY_PASSWORD", secret)  # so does an app's own copy
        monkeypatch.setenv("APP_SETTING", "kept")
        async with Queue(queue_name) as queue:
            await queue.add_bulk([("j", {"i": i, "secret": secret}) for i in range(6)])
            worker: Worker[Any, Any] = Worker(
                queue_name,
                "tests.fixtures.sandbox_procs:environ_of_child",
                sandbox=SandboxOptions(start_method=start_method),  # type: ignore[arg-type]
                concurrency=2,
            )
            async with worker:
                await wait_for(lambda: worker.completed_count == 6, timeout=30)
                pool = worker.sandbox_pool
                assert pool is not None
                pids = [*pool.pids, *([pool.forkserver_pid] if pool.forkserver_pid else [])]
                assert len(pids) >= 2
                for pid in pids:
                    assert exposed(psutil.Process(pid), secret) == [], pid
            jobs = await queue.get_jobs("completed")
            await queue.obliterate(force=True)
    assert len(jobs) == 6
    for job in jobs:
        seen = job.returnvalue
        assert "GLIDEMQ_URL" not in seen["names"]
        assert "APP_VALKEY_PASSWORD" not in seen["names"]
        assert "APP_SETTING" in seen["names"]  # the rest of the environment is kept
        assert not seen["has_secret"]


def test_child_environ_drops_credentials_and_keeps_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from glidemq.sandbox.launcher import child_environ

    monkeypatch.setenv("GLIDEMQ_URL", "valkey://cache:6379")  # by name, password or not
    monkeypatch.setenv("REDISCLI_AUTH", "x")
    monkeypatch.setenv("CACHE_URL", "redis://:other-secret@cache:6379")  # a URL with one
    monkeypatch.setenv("TOKEN_COPY", "prefix-long-secret-suffix")  # holds the password
    monkeypatch.setenv("APP_SETTING", "kept")
    env = child_environ(["long-secret"])
    assert not {"GLIDEMQ_URL", "REDISCLI_AUTH", "CACHE_URL", "TOKEN_COPY"} & set(env)
    assert env["APP_SETTING"] == "kept"
    assert "PATH" in child_environ(["a"])  # a very short password is not searched for
