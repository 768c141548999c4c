"""Building and adding flows: `FlowProducer` (trees and DAGs added atomically), the shape of a
flow before it is sent (`plan`), the chain/group/chord/dag builders, and flow budgets."""

from __future__ import annotations

from .builders import Dag, DagNode, chain, chord, dag, group
from .flow import FlowJob, FlowProducer, JobNode

__all__ = ["Dag", "DagNode", "FlowJob", "FlowProducer", "JobNode", "chain", "chord", "dag", "group"]
