"""The consumer side: `Worker` and its machinery, one duty a module (docs/ARCHITECTURE.md):
slots, fetching, holding, leases, completions (`intake`), maintenance, the watchdog, batch
mode, run-time limits, what a failure means, and graceful shutdown of plain programs."""

from __future__ import annotations

from .shutdown import GracefulShutdown
from .worker import Processor, Worker

__all__ = ["GracefulShutdown", "Processor", "Worker"]
