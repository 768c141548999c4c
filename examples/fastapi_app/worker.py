"""The worker of the FastAPI example: `glidemq-run examples.fastapi_app.worker:process`."""

from __future__ import annotations

from typing import Any

import glidemq


@glidemq.processor("signups", concurrency=10)
async def process(job: glidemq.Job[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Pretend to send the welcome mail."""
    return {"sent_to": job.data["email"]}
