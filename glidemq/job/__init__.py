"""A job and what it reads and does on its own: its record and methods (`job`), the checks of
their arguments, its flow (parents, children, dependencies), suspend and signal on the job's
side, and its output stream."""

from __future__ import annotations

from .flowview import Dependencies, Flow, FlowNode
from .job import Job, JobRunner, JobState
from .streams import StreamChunk

__all__ = ["Dependencies", "Flow", "FlowNode", "Job", "JobRunner", "JobState", "StreamChunk"]
