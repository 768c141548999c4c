"""Reading and acting on queues: the one typed layer every operator face is built on.

- `glidemq.queue.admin` (also `glidemq.admin.base`): `QueueAdmin`, the reading and
  maintenance methods of every `Queue`.
- `glidemq.admin.model`: the dataclasses the layer returns (queue summaries and status, job
  pages and details, action results).
- `glidemq.admin.queries` and `glidemq.admin.actions`: the reads and the state changes, each
  on a `QueueView`.
- `glidemq.admin.session`: `Admin`, one connection for any number of queues, with every query
  and action as a method; the `glidemq` command (`glidemq.admin.cli`) only formats its answers.

None of them spells an FCALL or a key name beyond what `Queue` already does.
"""

from .base import JOB_STATES, JobCounts, QueueAdmin

__all__ = ["JOB_STATES", "JobCounts", "QueueAdmin"]
