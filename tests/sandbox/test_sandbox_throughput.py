"""A burst of no-op jobs through the sandbox pool in both shapes, next to the in-process
worker on the same server (rates printed with -s).

Rates are not asserted: on a shared machine they swing with the other CI shard, and speed
claims belong to the benchmark (`python -m glidemq.bench.sandbox`, numbers in
docs/SANDBOX.md). What is asserted is that every pool shape drains the whole burst."""

from __future__ import annotations

from typing import Any

from glidemq.bench.sandbox import throughput
from glidemq.sandbox import SandboxOptions


async def test_sandbox_pools_drain_a_burst_of_no_op_jobs(
    valkey_server: Any, queue_name: str
) -> None:
    n = 4000
    inproc = await throughput(valkey_server.url, n, 8, None, f"{queue_name}-a")
    default = await throughput(valkey_server.url, n, 8, SandboxOptions(), f"{queue_name}-b")
    shared = await throughput(
        valkey_server.url, n, 8, SandboxOptions(max_children=1), f"{queue_name}-c"
    )
    print(
        f"\nno-op jobs/s at concurrency 8: in-process {inproc:,.0f}, sandbox (8 children) "
        f"{default:,.0f}, sandbox (1 async child) {shared:,.0f}"
    )
    # throughput() returns only once all n jobs completed; a rate is finite and positive
    assert all(0 < rate < float("inf") for rate in (inproc, default, shared))
