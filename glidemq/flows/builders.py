"""Workflow builders: chain, group, chord and dag.

They only build `FlowJob` graphs (no server calls); add the result with `FlowProducer.add`
(chain, group, chord) or `FlowProducer.add_dag` (dag). docs/WORKFLOWS.md shows each one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError
from ..types import JobOptions
from .plan import FlowJob, plan_flow

__all__ = ["Dag", "DagNode", "chain", "chord", "dag", "group"]

GROUP_JOB_NAME = "__group__"


def _copy(job: FlowJob, what: str) -> FlowJob:
    if not isinstance(job, FlowJob):
        raise ValidationError(what, f"expected a FlowJob, got {type(job).__name__}")
    return FlowJob(job.name, job.queue_name, job.data, job.opts, list(job.children))


def chain(steps: Iterable[FlowJob]) -> FlowJob:
    """Steps that run one after another, in the order given.

    Each step becomes a child of the next one, so the last step is the root of the returned
    flow and runs last; a step finds the previous step's return value in
    `await job.get_children_values()`. The inputs are not modified.
    """
    node: FlowJob | None = None
    for i, step in enumerate(steps):
        copy = _copy(step, f"chain[{i}]")
        if node is not None:
            copy.children.append(node)
        node = copy
    if node is None:
        raise ValidationError("chain", "needs at least one step")
    return node


def group(
    jobs: Iterable[FlowJob],
    *,
    queue_name: str | None = None,
    name: str = GROUP_JOB_NAME,
    data: Any = None,
    opts: JobOptions | Mapping[str, Any] | None = None,
) -> FlowJob:
    """Jobs that run in parallel, under one extra parent job that runs when all finished.

    The parent is named `name` ("__group__") in `queue_name` (default: the first job's
    queue); its processor typically returns `await job.get_children_values()`.
    """
    children = [_copy(j, f"group[{i}]") for i, j in enumerate(jobs)]
    if not children:
        raise ValidationError("group", "needs at least one job")
    return FlowJob(name, queue_name or children[0].queue_name, data, opts, children)


def chord(jobs: Iterable[FlowJob], callback: FlowJob) -> FlowJob:
    """Jobs that run in parallel, then `callback`, which reads their results with
    `get_children_values()`. Returns a copy of `callback` with the jobs as its children."""
    root = _copy(callback, "callback")
    added = [_copy(j, f"chord[{i}]") for i, j in enumerate(jobs)]
    if not added:
        raise ValidationError("chord", "needs at least one job")
    root.children.extend(added)
    return root


@dataclass(frozen=True)
class DagNode:
    """One job of a DAG. It runs after every node named in `depends_on`; `key` names it in the
    DAG (default: its job `name`, which then must be unique)."""

    name: str
    queue_name: str
    data: Any = None
    opts: JobOptions | Mapping[str, Any] | None = None
    depends_on: Sequence[str] = ()
    key: str | None = None


@dataclass(frozen=True)
class Dag:
    """A checked DAG: its jobs by key, wired as FlowJob parents and children, and its
    `roots`, the jobs no other job depends on (they run last)."""

    jobs: dict[str, FlowJob] = field(default_factory=dict)
    roots: list[FlowJob] = field(default_factory=list)


def dag(nodes: Iterable[DagNode]) -> Dag:
    """Build a DAG from nodes given in any order. A node depended on by several others is one
    job with several parents.

    Raises ValidationError for a duplicate key or an unknown `depends_on` name, and CycleError
    naming the jobs of a cycle ("a -> b -> a": a waits for b, which waits for a). Nothing is
    written: add it with `FlowProducer.add_dag`.
    """
    items = list(nodes)
    if not items:
        raise ValidationError("dag", "needs at least one node")
    jobs: dict[str, FlowJob] = {}
    keys: list[str] = []
    for i, node in enumerate(items):
        if not isinstance(node, DagNode):
            raise ValidationError(f"dag[{i}]", f"expected a DagNode, got {type(node).__name__}")
        key = node.name if node.key is None else node.key
        if not isinstance(key, str) or not key:
            raise ValidationError(f"dag[{i}].key", "must be a non-empty string")
        if key in jobs:
            raise ValidationError(f"dag[{i}].key", f"{key!r} names two nodes")
        jobs[key] = FlowJob(node.name, node.queue_name, node.data, node.opts)
        keys.append(key)
    depended: set[str] = set()
    for key, node in zip(keys, items, strict=True):
        deps = [node.depends_on] if isinstance(node.depends_on, str) else list(node.depends_on)
        listed: set[str] = set()
        for dep in deps:
            if dep not in jobs:
                raise ValidationError(f"{key}.depends_on", f"no node named {dep!r}")
            if dep not in listed:
                listed.add(dep)
                jobs[key].children.append(jobs[dep])
                depended.add(dep)
    label = {id(job): key for key, job in jobs.items()}
    plan_flow(jobs.values(), lambda job: label[id(job)])  # raises CycleError
    return Dag(jobs, [job for key, job in jobs.items() if key not in depended])
