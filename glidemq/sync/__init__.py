"""The sync API: glidemq for code without an event loop (Flask and Django views, scripts,
notebooks, pre-fork servers).

    from glidemq import sync

    emails = sync.Queue("emails")
    job = emails.add("welcome", {"to": "ada@example.com"})
    print(job.id, job.get_state())

Each call blocks until the server answered. It works from many threads at once, inside a
thread whose own event loop is running (Jupyter), and after `os.fork` (the child gets a
connection of its own). Tasks have `Task.delay(...)`, the sync form of `Task.add`.
`Worker` runs jobs in the background of a script or test; production workers are
`glidemq-run`.
"""

from __future__ import annotations

from .flow import FlowProducer, JobNode
from .queue import Job, Queue
from .runner import DEFAULT_TIMEOUT
from .worker import Worker

__all__ = ["DEFAULT_TIMEOUT", "FlowProducer", "Job", "JobNode", "Queue", "Worker"]
