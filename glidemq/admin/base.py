"""`QueueAdmin`, the reading and maintenance methods of every `Queue` (defined in
glidemq.queue.admin, below `Queue`; the admin layer builds on it)."""

from __future__ import annotations

from ..queue.admin import JOB_STATES, JobCounts, QueueAdmin

__all__ = ["JOB_STATES", "JobCounts", "QueueAdmin"]
