"""`glidemq_reclaimStalled` in owner mode: the jobs of one consumer known to be dead are
handed back at once (what `glidemq-run` does for a killed process), and nobody else's."""

from __future__ import annotations

from typing import Any

from glidemq import ConnectionOptions, Queue
from glidemq.client.context import now_ms
from glidemq.runtime.reclaim import Holding, reclaim


async def _fetch(queue: Queue[Any, Any], consumer: str, n: int) -> list[str]:
    """Take n jobs as `consumer` (activated, as a worker takes them); their job ids."""
    ctx = await queue._context()
    reply = await ctx.fcall(
        "glidemq_completeAndFetchNext", ctx.fetch_keys, [str(now_ms()), consumer, str(n), "1", "0"]
    )
    flat = reply[1]
    return [flat[i + 1].decode() for i in range(0, len(flat), 3)]


async def test_owner_mode_hands_back_only_the_dead_consumers_jobs(
    valkey_server: Any, queue_name: str
) -> None:
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        await queue.add_bulk([("job", {"i": i}, None) for i in range(250)])
        ctx = await queue._context()
        await ctx.client.custom_command(["XGROUP", "CREATE", queue.keys.stream, "workers", "0"])
        dead = await _fetch(queue, "dead-one", 230)  # more than one batch of 100
        alive = await _fetch(queue, "alive-one", 20)
        assert len(dead) == 230 and len(alive) == 20
        counts = await queue.get_job_counts()
        assert (counts.active, counts.waiting) == (250, 0), counts

        conn = ConnectionOptions.from_url(valkey_server.url)
        holding = Holding(queue_name, "glide", "dead-one", max_stalled_count=1)
        done, requeued, failed = await reclaim(conn, [holding])
        assert done == [holding.key]
        assert (requeued, failed) == (230, 0)

        counts = await queue.get_job_counts()
        assert (counts.active, counts.waiting) == (20, 230), counts
        for job_id in dead[:5]:
            job = await queue.get_job(job_id)
            assert job is not None and job.stalled_count == 1
        for job_id in alive[:5]:
            assert await ctx.get_state(job_id) == "active"
        consumers = await ctx.client.custom_command(
            ["XINFO", "CONSUMERS", queue.keys.stream, "workers"]
        )
        names = {c[b"name"] if isinstance(c, dict) else c[1] for c in consumers}  # type: ignore[union-attr]
        assert b"dead-one" not in names and b"alive-one" in names

        # a second call finds nothing and is harmless
        assert await reclaim(conn, [holding]) == ([holding.key], 0, 0)


async def test_owner_mode_takes_what_a_blocking_read_left_under_its_wake_consumer(
    valkey_server: Any, queue_name: str
) -> None:
    # killed between its blocking read and the activation queued behind it
    async with Queue(queue_name, connection=valkey_server.url) as queue:
        await queue.add_bulk([("job", {"i": i}, None) for i in range(3)])
        ctx = await queue._context()
        stream = queue.keys.stream
        await ctx.client.custom_command(["XGROUP", "CREATE", stream, "workers", "0"])
        running = await _fetch(queue, "dead-two", 1)
        read = await ctx.client.custom_command(
            [
                "XREADGROUP",
                "GROUP",
                "workers",
                "dead-two:wake",
                "COUNT",
                "5",
                "STREAMS",
                stream,
                ">",
            ]
        )
        assert read and len(running) == 1

        conn = ConnectionOptions.from_url(valkey_server.url)
        holding = Holding(queue_name, "glide", "dead-two", max_stalled_count=1)
        done, requeued, _ = await reclaim(conn, [holding])
        assert done == [holding.key] and requeued == 3
        counts = await queue.get_job_counts()
        assert (counts.active, counts.waiting) == (0, 3), counts
        consumers = await ctx.client.custom_command(["XINFO", "CONSUMERS", stream, "workers"])
        assert consumers == []  # both consumers removed
