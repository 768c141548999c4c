"""Errors of the chaos suite itself (not of the queue engine it exercises)."""

from __future__ import annotations

from ..errors import GlideMQError

__all__ = ["ChaosError"]


class ChaosError(GlideMQError):
    """A chaos run (`glidemq-chaos`) could not be set up, e.g. its worker fleet never
    became ready; the run's verdict is then unknown, not a failure of the queue."""
