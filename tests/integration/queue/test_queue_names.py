"""Queue names outside ASCII are valid names: a queue, a worker and the admin views work
with them (the connection's client name is percent-encoded, since the server takes only
printable ASCII there)."""

from __future__ import annotations

from typing import Any

import pytest

from glidemq import ConnectionOptions, Job, Queue, Worker
from glidemq.client.connection import client_name_of
from tests.helpers import FAST, wait_for


@pytest.mark.parametrize("name", ["队列", "é", "q\u200b", "emoji-🚀"])
async def test_a_queue_named_outside_ascii_adds_and_runs(
    conn: ConnectionOptions, name: str
) -> None:
    async def work(job: Job[Any, Any]) -> str:
        return f"done {job.data['n']}"

    async with Queue(name, connection=conn) as queue:
        await queue.obliterate(force=True)
        job = await queue.add("j", {"n": 1})
        assert job is not None
        async with Worker(name, work, connection=conn, **FAST):
            await wait_for(lambda: queue.get_job_counts(), timeout=10)

            async def done() -> bool:
                return (await queue.get_job_counts()).completed == 1

            await wait_for(done, timeout=20)
        finished = await queue.get_job(job.id)
        assert finished is not None and finished.returnvalue == "done 1"
        await queue.obliterate(force=True)


def test_client_names_are_printable_ascii() -> None:
    for raw in ("glidemq-queue-队列", "a b", "x%y", "q\u200b"):
        name = client_name_of(raw)
        assert name is not None
        assert all("!" <= c <= "~" for c in name), name
    assert client_name_of("glidemq-queue-emails") == "glidemq-queue-emails"
    assert client_name_of(None) is None


async def test_generated_ids_skip_a_block_of_custom_numeric_ids(
    conn: ConnectionOptions, queue_name: str
) -> None:
    from glidemq import JobIdsExhaustedError

    async with Queue(queue_name, connection=conn) as queue:
        first = await queue.add("a", {})
        assert first is not None
        n = int(first.id)
        for i in range(n + 1, n + 40):
            await queue.add("custom", {}, {"job_id": str(i)})
        nxt = await queue.add("b", {})
        assert nxt is not None and nxt.id == str(n + 40)
        # A block longer than one add may skip: a typed error, and the next add goes on.
        base = n + 41
        await queue.add_bulk(
            [("custom", {}, {"job_id": str(i)}) for i in range(base, base + 10_001)]
        )
        with pytest.raises(JobIdsExhaustedError):
            await queue.add("c", {})
        later = await queue.add("d", {})
        assert later is not None and int(later.id) == base + 10_001
        await queue.obliterate(force=True)
