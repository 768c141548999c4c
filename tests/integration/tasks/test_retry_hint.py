"""`raise glidemq.Retry()` in a task with no attempt left (the default attempts=1 allows no
retry) fails the job, and the worker says why on its log, once per queue: Celery counts
`max_retries` after the first run, glidemq's `attempts` counts every try."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import glidemq
from glidemq import ConnectionOptions, Worker
from tests.helpers import FAST, wait_for


def _hints(caplog: pytest.LogCaptureFixture) -> list[str]:
    said = [r.getMessage() for r in caplog.records]
    return [m for m in said if "raised Retry but had no attempt" in m]


async def test_a_retry_without_attempts_left_fails_with_one_hint(
    conn: ConnectionOptions, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="glidemq.worker")

    @glidemq.task(queue_name, connection=conn)
    async def charge(invoice: int) -> str:
        raise glidemq.Retry(delay=10, reason="gateway busy")

    @glidemq.task(queue_name, connection=conn, attempts=2)
    async def retried(invoice: int) -> str:
        raise glidemq.Retry(delay=10, reason="still busy")

    first, second = await charge.add(1), await charge.add(2)
    third = await retried.add(3)
    failed: list[Any] = []
    worker = Worker(queue_name, glidemq.task_processor(charge, retried), connection=conn, **FAST)
    worker.on("failed", lambda job, error: failed.append((job.id, job.state)))
    async with worker:
        await wait_for(lambda: len(failed) == 4, timeout=30)  # 1 + 1 + 2 tries
    assert {(i, s) for i, s in failed if s == "failed"} == {
        (first.id, "failed"),
        (second.id, "failed"),
        (third.id, "failed"),
    }
    [hint] = _hints(caplog)  # once for the queue, however many jobs
    assert f"queue {queue_name}" in hint and "attempts=1" in hint and "max_retries" in hint
    async with glidemq.Queue(queue_name, connection=conn) as queue:
        await queue.obliterate(force=True)
