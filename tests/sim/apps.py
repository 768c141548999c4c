"""Processors a user might bring to `python -m glidemq.sim run --app` (used by the tests)."""

from __future__ import annotations

import asyncio
from typing import Any

SEEN: list[str] = []


async def process(job: Any) -> dict[str, Any]:
    """Work a little, fail the first try of every third job, keep a side effect."""
    SEEN.append(job.id)
    await asyncio.sleep(0.02)
    if int(job.id) % 3 == 0 and job.attempts_made == 0:
        raise RuntimeError("flaky downstream")
    return {"ok": job.id}


def process_sync(job: Any) -> str:
    """A sync processor: run on the loop by the simulator, as a thread runs it for real."""
    SEEN.append(job.id)
    return f"done {job.id}"
