"""glidemq: fast, reliable background jobs for Python on Valkey.

async with Queue("emails") as queue:
    await queue.add("welcome", {"to": "ada@example.com"})

async def send(job: Job) -> str: ...
async with Worker("emails", send, concurrency=50):
    ...
"""

from __future__ import annotations

from .broadcast.broadcast import Broadcast, BroadcastWorker
from .client.connection import ConnectionOptions
from .client.retry import RetryPolicy
from .durable import Workflow, WorkflowContext, workflow
from .errors import (
    BatchError,
    ConnectionError,
    CostExceedsCapacityError,
    CrossSlotError,
    CycleError,
    DelayedError,
    DuplicateJobError,
    DurabilityError,
    DurabilityTimeoutError,
    EventTimeoutError,
    ForeignLibraryError,
    GlideMQError,
    GroupFullError,
    HistoryLimitError,
    JobFailedError,
    JobIdsExhaustedError,
    JobNotFoundError,
    JobStateError,
    JobTimeoutError,
    LibraryError,
    NonDeterminismError,
    OperationTimeoutError,
    PayloadTooLargeError,
    ProcessorExitError,
    QueueClosedError,
    QueueFullError,
    QueueNotFoundError,
    RateLimitError,
    Retry,
    SerializerMismatchError,
    ServerError,
    StepFailedError,
    SuspendedError,
    TaskArgumentError,
    UnrecoverableError,
    UnsupportedOptionError,
    ValidationError,
    WaitingChildrenError,
)
from .events import QueueEvent, QueueEvents
from .flows.builders import Dag, DagNode, chain, chord, dag, group
from .flows.flow import FlowJob, FlowProducer, JobNode
from .job.flowview import Dependencies, Flow, FlowNode
from .job.job import Job
from .job.steps import Step
from .job.streams import StreamChunk
from .options.durability import Durability
from .options.limits import RateLimit, TokenBucket
from .options.usage import FlowUsage, ModelUsage, TokenLimiter, Usage, UsageSummary, UsageTotals
from .processor import ProcessorSpec, processor
from .producer import Producer
from .queue.backlog import Backlog
from .queue.groups import GroupInfo
from .queue.queries import Metrics, WorkerInfo
from .queue.queue import JobCounts, Queue
from .queue.schedulers import JobScheduler, JobTemplate
from .queue.suspend import Signal
from .sandbox import SandboxOptions
from .tasks import Task, configure_tasks, current_job, task, task_processor
from .types import Backoff, BatchOptions, Deduplication, JobOptions, KeepJobs, WorkerOptions
from .version import __version__
from .worker.shutdown import GracefulShutdown
from .worker.worker import Processor, Worker

__all__ = [
    "Backlog",
    "Backoff",
    "BatchError",
    "BatchOptions",
    "Broadcast",
    "BroadcastWorker",
    "ConnectionError",
    "ConnectionOptions",
    "CostExceedsCapacityError",
    "CrossSlotError",
    "CycleError",
    "Dag",
    "DagNode",
    "Deduplication",
    "DelayedError",
    "Dependencies",
    "DuplicateJobError",
    "Durability",
    "DurabilityError",
    "DurabilityTimeoutError",
    "EventTimeoutError",
    "Flow",
    "FlowJob",
    "FlowNode",
    "FlowProducer",
    "FlowUsage",
    "ForeignLibraryError",
    "GlideMQError",
    "GracefulShutdown",
    "GroupFullError",
    "GroupInfo",
    "HistoryLimitError",
    "Job",
    "JobCounts",
    "JobFailedError",
    "JobIdsExhaustedError",
    "JobNode",
    "JobNotFoundError",
    "JobOptions",
    "JobScheduler",
    "JobStateError",
    "JobTemplate",
    "JobTimeoutError",
    "KeepJobs",
    "LibraryError",
    "Metrics",
    "ModelUsage",
    "NonDeterminismError",
    "OperationTimeoutError",
    "PayloadTooLargeError",
    "Processor",
    "ProcessorExitError",
    "ProcessorSpec",
    "Producer",
    "Queue",
    "QueueClosedError",
    "QueueEvent",
    "QueueEvents",
    "QueueFullError",
    "QueueNotFoundError",
    "RateLimit",
    "RateLimitError",
    "Retry",
    "RetryPolicy",
    "SandboxOptions",
    "SerializerMismatchError",
    "ServerError",
    "Signal",
    "Step",
    "StepFailedError",
    "StreamChunk",
    "SuspendedError",
    "Task",
    "TaskArgumentError",
    "TokenBucket",
    "TokenLimiter",
    "UnrecoverableError",
    "UnsupportedOptionError",
    "Usage",
    "UsageSummary",
    "UsageTotals",
    "ValidationError",
    "WaitingChildrenError",
    "Worker",
    "WorkerInfo",
    "WorkerOptions",
    "Workflow",
    "WorkflowContext",
    "__version__",
    "chain",
    "chord",
    "configure_tasks",
    "current_job",
    "dag",
    "group",
    "processor",
    "task",
    "task_processor",
    "workflow",
]
