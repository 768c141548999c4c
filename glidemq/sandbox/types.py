"""SandboxOptions and the processor targets of a sandbox (defined in glidemq.options.sandbox,
below the engine, since WorkerOptions holds one)."""

from __future__ import annotations

from ..options.sandbox import DEFAULT_ATTR, SandboxOptions, normalize_target, processor_target

__all__ = ["DEFAULT_ATTR", "SandboxOptions", "normalize_target", "processor_target"]
