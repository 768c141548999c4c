"""A plain Worker logs through the `glidemq.worker` logger: a failed try at WARNING (a
`glidemq.Retry` at INFO) with its job, try and delay; the final failure at ERROR with its
traceback; each record's facts in its `glidemq` attribute. Successes log nothing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import glidemq
from glidemq import ConnectionOptions, Job, Queue, Worker
from tests.helpers import FAST


def _facts(caplog: pytest.LogCaptureFixture) -> list[tuple[logging.LogRecord, dict[str, Any]]]:
    return [(r, r.glidemq) for r in caplog.records if hasattr(r, "glidemq")]  # type: ignore[attr-defined]


async def test_failed_tries_and_the_final_failure_are_logged(
    queue: Queue[Any, Any], conn: ConnectionOptions, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="glidemq")

    async def processor(job: Job[Any, Any]) -> str:
        if job.name == "fine" or (job.name == "polite" and job.attempts_made):
            return "ok"
        if job.name == "polite":
            raise glidemq.Retry(delay=10, reason="busy")
        raise KeyError(f"no customer {job.data}")

    fine = await queue.add("fine", 1)
    bad = await queue.add("lookup", 7, {"attempts": 2, "backoff": {"type": "fixed", "delay": 5}})
    polite = await queue.add("polite", 0, {"attempts": 2})
    assert fine and bad and polite
    async with Worker(queue.name, processor, connection=conn, **FAST):
        for job in (fine, bad, polite):
            await job.wait_until_finished(timeout=10)
    seen = _facts(caplog)
    assert not [f for _, f in seen if f.get("job_id") == fine.id]  # a success is not logged
    (retry, final) = [(r, f) for r, f in seen if f.get("job_id") == bad.id]
    assert retry[0].levelno == logging.WARNING and retry[0].name == "glidemq.worker"
    assert retry[1] == {
        "event": "job_retry",
        "queue": queue.name,
        "job_id": bad.id,
        "job_name": "lookup",
        "attempt": 1,
        "attempts": 2,
        "exception": "KeyError",
        "error": "'no customer 7'",
        "delay_ms": 5,
    }
    assert f"job {bad.id} (lookup) of queue {queue.name!r} failed (try 1 of 2)" in (
        retry[0].getMessage()
    )
    assert final[0].levelno == logging.ERROR and final[1]["event"] == "job_failed"
    assert final[0].exc_info is not None and final[0].exc_info[0] is KeyError
    assert "failed for good (try 2 of 2): KeyError" in final[0].getMessage()
    (asked,) = [(r, f) for r, f in seen if f.get("job_id") == polite.id]
    assert asked[0].levelno == logging.INFO and "asked for a retry" in asked[0].getMessage()
