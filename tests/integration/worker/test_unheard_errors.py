"""A Worker used without `on("error")` does not hide a lost server: the failures its loops
emit are logged at WARNING (one line, then at most one a minute), and with a listener they
go to the listener alone."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from glidemq import Job, Queue, Worker
from glidemq.server import EmbeddedValkey
from tests.helpers import FAST, wait_for


def _unheard(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "no 'error' listener" in r.getMessage()]


async def _noop(job: Job[Any, Any]) -> None:
    return None


@pytest.mark.parametrize("listening", [False, True])
async def test_a_lost_server_is_logged_when_nobody_listens_for_errors(
    caplog: pytest.LogCaptureFixture, listening: bool
) -> None:
    caplog.set_level(logging.WARNING, logger="glidemq")
    with EmbeddedValkey() as server:
        async with Queue("unheard", connection=server.url) as queue:
            await queue.add("x", {})
        worker = Worker("unheard", _noop, connection=server.url, **FAST)
        heard: list[BaseException] = []
        if listening:
            worker.on("error", heard.append)
        await worker.start()
        try:
            await wait_for(lambda: worker.completed_count == 1, timeout=30)
            server.stop()
            if listening:
                await wait_for(lambda: len(heard) >= 2, timeout=60)
                assert not _unheard(caplog)
            else:
                await wait_for(lambda: _unheard(caplog), timeout=60)
                assert len(_unheard(caplog)) == 1
                assert "worker of queue unheard" in _unheard(caplog)[0].getMessage()
        finally:
            await worker.close(force=True, timeout=5)
