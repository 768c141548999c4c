"""The chaos suite (`glidemq-chaos`): run glidemq under faults and check that no job is lost.

Scenarios live in `glidemq.chaos.scenarios` (see `glidemq.chaos.scenario` for how to write
one); docs/CHAOS.md describes them, the guarantees and the measured numbers.
"""

from __future__ import annotations

from .context import ChaosRun, Fault
from .errors import ChaosError
from .registry import register, scenarios
from .scenario import FleetSettings, Scenario

__all__ = ["ChaosError", "ChaosRun", "Fault", "FleetSettings", "Scenario", "register", "scenarios"]
