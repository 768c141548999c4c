"""A small app for glidemq-run: `glidemq-run examples.app:process --queue demo`."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import glidemq


async def process(job: glidemq.Job[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Echo the job back with the pid that ran it; sleeps `sleep` seconds if asked to."""
    delay = float(job.data.get("sleep", 0)) if isinstance(job.data, dict) else 0.0
    if delay:
        await asyncio.sleep(delay)
    return {"id": job.id, "pid": os.getpid()}


@glidemq.processor("demo-batch", batch=True, concurrency=2)
async def process_batch(jobs: list[glidemq.Job[Any, Any]]) -> list[dict[str, Any]]:
    """Batch processor: one result per job, in order."""
    return [{"id": job.id, "pid": os.getpid()} for job in jobs]
