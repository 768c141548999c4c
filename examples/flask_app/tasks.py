"""The tasks of the Flask example: `glidemq-run examples.flask_app.tasks` runs them."""

from __future__ import annotations

import os

import glidemq

QUEUE = os.environ.get("FLASK_EXAMPLE_QUEUE", "flask-emails")


@glidemq.task(QUEUE, attempts=3)
def send_welcome(email: str, name: str = "there") -> dict[str, object]:
    """Pretend to send the welcome mail; a sync task, as most Flask code is."""
    glidemq.current_job().log(f"mail to {email}")  # in a sync task: returns when logged
    return {"sent_to": email, "greeting": f"Hello {name}", "worker_pid": os.getpid()}
