"""A deterministic simulator of glidemq: the real Queue, Worker and FlowProducer on the
in-memory server, in one process on virtual time, with faults and a workload chosen by a
seed, and a checker of named invariants over the history (docs/SIMULATION.md).

    python -m glidemq.sim run --seeds 0-999
    python -m glidemq.sim run --seed 42 --trace

From Python: `run_plan(make_plan(seed))` returns a `Result` with the history and the
violations; `glidemq.sim.revert` patches a fix out and hunts for the defect it removed.
"""

from .plan import Plan, make_plan
from .runner import Result, run_plan, run_seed

__all__ = ["Plan", "Result", "make_plan", "run_plan", "run_seed"]
