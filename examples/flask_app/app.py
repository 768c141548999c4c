"""A Flask app that enqueues a task on POST and reports the job on GET, through the sync API.

    GLIDEMQ_URL=valkey://127.0.0.1:6379 gunicorn -w 2 -k gthread --threads 4 \\
        examples.flask_app.app:app
    GLIDEMQ_URL=valkey://127.0.0.1:6379 glidemq-run examples.flask_app.tasks

    curl -X POST localhost:8000/signups -d email=ada@example.com
    curl localhost:8000/signups/1
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, abort, request

from glidemq.integrations.flask import GlideMQ

from .tasks import QUEUE, send_welcome

app = Flask(__name__)
app.config["GLIDEMQ_URL"] = os.environ.get("GLIDEMQ_URL")  # None: the local default
glidemq_ext = GlideMQ(app)


@app.post("/signups")
def create_signup() -> tuple[dict[str, Any], int]:
    """Enqueue the welcome mail; the worker sends it."""
    email = request.form.get("email") or (request.get_json(silent=True) or {}).get("email")
    if not email:
        abort(400, "email is required")
    job = send_welcome.delay(email, name=request.form.get("name", "there"))
    assert job is not None  # no custom id or deduplication: never skipped
    return {"id": job.id, "served_by": os.getpid()}, 202


@app.get("/signups/<job_id>")
def show_signup(job_id: str) -> dict[str, Any]:
    """The job's state, and the mail's outcome once sent."""
    job = glidemq_ext.queue(QUEUE).get_job(job_id)
    if job is None:
        abort(404)
    return {"id": job.id, "state": job.get_state(), "result": job.returnvalue}


@app.get("/stats")
def stats() -> dict[str, Any]:
    """Job counts of the queue."""
    counts = glidemq_ext.queue(QUEUE).get_job_counts()
    return {"waiting": counts.waiting, "active": counts.active, "completed": counts.completed}
