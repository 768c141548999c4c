"""Acceptance: ordering keys under `glidemq-run --procs 4` (the real CLI in a subprocess).

50 keys x 200 jobs, added with the keys interleaved. Every key's jobs must start in the
order they were added and never two at a time, while the four processes share the work.
The processor (tests/fixtures/ordering_app.py) records each start in Valkey. Standalone
Valkey only: the CLI tests run against the session's standalone server.
"""

from __future__ import annotations

from typing import Any

import valkey

from glidemq import JobOptions, Queue
from tests.fixtures.ordering_app import tag
from tests.helpers import wait_for

from .conftest import Launcher, pending_entries

KEYS = 50
PER_KEY = 200


async def test_ordering_keys_keep_per_key_order_under_procs_4(
    run_cli: Launcher, cli_queue: Queue[Any, Any], raw: valkey.Valkey, valkey_server: Any
) -> None:
    t = tag(cli_queue.name)
    items = [
        ("job", {"key": f"k{k}", "seq": s}, JobOptions(ordering_key=f"k{k}"))
        for s in range(PER_KEY)
        for k in range(KEYS)
    ]
    added = await cli_queue.add_bulk(items)
    assert all(j is not None for j in added)
    cli = run_cli(
        "tests.fixtures.ordering_app:record",
        *("--queue", cli_queue.name, "--url", valkey_server.url),
        *("--procs", 4, "--concurrency", 20),
        env={"GLIDEMQ_TEST_ORDER_URL": valkey_server.url},
    )
    await cli.wait_workers(4)

    async def all_done() -> bool:
        c = await cli_queue.get_job_counts()
        assert c.failed == 0, c
        return c.completed == KEYS * PER_KEY

    try:
        await wait_for(all_done, timeout=120, interval=0.2)
        assert raw.lrange(f"{t}:overlaps", 0, -1) == []
        for k in range(KEYS):
            order = [int(x) for x in raw.lrange(f"{t}:order:k{k}", 0, -1)]
            assert order == list(range(PER_KEY)), f"key k{k} ran out of order: {order[:20]}"
        assert raw.scard(f"{t}:pids") >= 2  # the processes shared the keys
        assert pending_entries(raw, cli_queue) == 0
    finally:
        keys = [f"{t}:order:k{k}" for k in range(KEYS)]
        keys += [f"{t}:running:k{k}" for k in range(KEYS)] + [f"{t}:overlaps", f"{t}:pids"]
        raw.delete(*keys)
