"""A FastAPI app that enqueues a job on POST and reports it on GET.

    GLIDEMQ_URL=valkey://127.0.0.1:6379 uvicorn examples.fastapi_app.app:app
    GLIDEMQ_URL=valkey://127.0.0.1:6379 glidemq-run examples.fastapi_app.worker:process

    curl -X POST localhost:8000/signups -H 'content-type: application/json' \
         -d '{"email": "ada@example.com"}'
    curl localhost:8000/signups/1
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel

from glidemq import Queue
from glidemq.integrations.fastapi import GlideMQ

QUEUE = "signups"

# The connection comes from GLIDEMQ_URL (or pass connection=...). The queue is opened when
# the app starts and closed when it stops.
queues = GlideMQ([QUEUE])
app = FastAPI(lifespan=queues.lifespan)
SignupQueue = Annotated[Queue[Any, Any], Depends(queues.dependency(QUEUE))]


class Signup(BaseModel):
    email: str


@app.post("/signups", status_code=202)
async def create_signup(signup: Signup, queue: SignupQueue) -> dict[str, Any]:
    """Enqueue a welcome mail; the worker sends it."""
    job = await queue.add("welcome", {"email": signup.email}, {"attempts": 3})
    assert job is not None  # no custom id or deduplication: never skipped
    return {"id": job.id}


@app.get("/signups/{job_id}")
async def get_signup(job_id: str, queue: SignupQueue) -> dict[str, Any]:
    """The job's state, and its result once done."""
    job = await queue.get_job(job_id)
    if job is None:
        raise HTTPException(404, "no such job")
    return {"id": job.id, "state": await job.get_state(), "result": job.returnvalue}
