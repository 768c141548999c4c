"""The shape of a flow before anything is sent: `FlowJob` trees and DAGs, walked parents
first with the cycle and size checks (`plan_flow`), and the one-slot rule of a flow's
queues. No server call: glidemq.flows.flow sends them, glidemq.flows.builders builds them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CrossSlotError, CycleError, ValidationError
from ..keys import queue_slot
from ..types import JobOptions

__all__ = [
    "MAX_FLOW_JOBS",
    "FlowJob",
    "as_flow_job",
    "check_same_slot",
    "flow_label",
    "plan_flow",
]

MAX_FLOW_JOBS = 10_000
"""Most jobs in one flow: one server call writes them all, and it should stay short."""


@dataclass(eq=False)
class FlowJob:
    """One job of a flow; it runs once every job in `children` finished.

    `opts` are the job's JobOptions (or a dict of the same names); a parent's `delay` counts
    from the moment its last child finished. The same FlowJob object under several parents is
    one job that all of them wait for.
    """

    name: str
    queue_name: str
    data: Any = None
    opts: JobOptions | Mapping[str, Any] | None = None
    children: list[FlowJob] = field(default_factory=list)


_FIELDS = ("name", "queue_name", "data", "opts", "children")


def as_flow_job(value: object, where: str = "flow") -> FlowJob:
    """`value` as a FlowJob: a FlowJob as it is, or a mapping with its fields (`name`,
    `queue_name`, `data`, `opts`, `children`: FlowJobs or such mappings), the form
    BullMQ's `FlowProducer.add` takes. TypeError for anything else; ValidationError naming
    the place (`flow.children[1].queue_name`) for a mapping that does not fit. The same
    mapping object under several parents is one job, as a shared FlowJob is."""
    made: dict[int, FlowJob] = {}

    def one(node: object, at: str) -> tuple[FlowJob, list[tuple[object, str]]]:
        if isinstance(node, FlowJob):
            return node, []
        if not isinstance(node, Mapping):
            raise TypeError(
                f"{at}: expected a FlowJob or a mapping with name and queue_name, "
                f"got {type(node).__name__}"
            )
        unknown = sorted(str(k) for k in node if k not in _FIELDS)
        if unknown:
            hint = " (spelled queue_name here)" if "queueName" in unknown else ""
            raise ValidationError(f"{at}.{unknown[0]}", f"unknown field{hint}; one of {_FIELDS}")
        for key in ("name", "queue_name"):
            if not isinstance(node.get(key), str):
                raise ValidationError(f"{at}.{key}", "must be a string")
        children = node.get("children") or []
        if not isinstance(children, list | tuple):
            raise ValidationError(f"{at}.children", "must be a list")
        job = FlowJob(node["name"], node["queue_name"], node.get("data"), node.get("opts"))
        return job, [(c, f"{at}.children[{i}]") for i, c in enumerate(children)]

    root, pending = one(value, where)
    if isinstance(value, Mapping):
        made[id(value)] = root
    todo = [(root, pending)]
    while todo:  # without recursion: chains may be thousands of jobs long
        parent, kids = todo.pop()
        for kid, at in kids:
            known = made.get(id(kid))
            if known is None:
                known, grandkids = one(kid, at)
                if isinstance(kid, Mapping):
                    made[id(kid)] = known
                    todo.append((known, grandkids))
            parent.children.append(known)
    return root


def flow_label(node: FlowJob) -> str:
    """How an error names a flow job: `queue:name` (a long name cut short)."""
    name = (
        node.name
        if not isinstance(node.name, str) or len(node.name) <= 64
        else node.name[:61] + "..."
    )
    return f"{node.queue_name}:{name}"


def _check_node(node: object) -> FlowJob:
    if not isinstance(node, FlowJob):
        raise ValidationError("flow", f"expected a FlowJob, got {type(node).__name__}")
    if not isinstance(node.children, list):
        raise ValidationError(f"{flow_label(node)}.children", "must be a list of FlowJob")
    return node


def plan_flow(
    starts: Iterable[FlowJob], label: Callable[[FlowJob], str] = flow_label
) -> list[tuple[FlowJob, list[int]]]:
    """Every job reachable from `starts`, parents before children, each with the indices of
    its parents in that list. Raises CycleError naming a cycle (labels from `label`), or
    ValidationError for more than MAX_FLOW_JOBS jobs. Writes nothing."""
    color: dict[int, int] = {}  # 1: on the current path, 2: done
    finished: list[FlowJob] = []
    for start in starts:
        _check_node(start)
        if color.get(id(start)):
            continue
        color[id(start)] = 1
        path = [start]
        stack = [iter(start.children)]
        while stack:  # depth-first, without recursion: chains may be thousands of jobs long
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
                node = path.pop()
                color[id(node)] = 2
                finished.append(node)
                continue
            _check_node(child)
            seen = color.get(id(child))
            if seen == 1:
                at = next(i for i, n in enumerate(path) if n is child)
                raise CycleError([label(n) for n in path[at:]] + [label(child)])
            if seen is None:
                if len(color) >= MAX_FLOW_JOBS:
                    raise ValidationError("flow", f"more than {MAX_FLOW_JOBS} jobs in one flow")
                color[id(child)] = 1
                path.append(child)
                stack.append(iter(child.children))
    order = finished[::-1]  # reversed post-order: every parent before its children
    index = {id(n): i for i, n in enumerate(order)}
    parents: list[list[int]] = [[] for _ in order]
    for i, node in enumerate(order):
        listed: set[int] = set()
        for child in node.children:
            if id(child) not in listed:
                listed.add(id(child))
                parents[index[id(child)]].append(i)
    return list(zip(order, parents, strict=True))


def check_same_slot(queues: Iterable[str]) -> None:
    """Raise CrossSlotError unless all these queues live in one cluster slot."""
    slots = {q: queue_slot(q) for q in queues}
    if len(set(slots.values())) > 1:
        raise CrossSlotError(slots)
