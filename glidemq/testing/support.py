"""What the in-memory classes refuse, with a typed error.

The in-memory server runs glidemq's own library, so every job option and every method of
Queue, Worker and Job works as on Valkey. What needs more than one process (the sandbox's
child processes) is refused with UnsupportedOptionError naming it, never silently ignored.
"""

from __future__ import annotations

from ..errors import UnsupportedOptionError

__all__ = [
    "UNSUPPORTED_JOB_METHODS",
    "UNSUPPORTED_QUEUE_METHODS",
    "UNSUPPORTED_WORKER_METHODS",
    "UNSUPPORTED_WORKER_OPTIONS",
    "unsupported",
]

UNSUPPORTED_QUEUE_METHODS: frozenset[str] = frozenset()
"""Public methods of `Queue` the in-memory classes refuse (none today)."""
UNSUPPORTED_WORKER_METHODS: frozenset[str] = frozenset()
"""Public methods of `Worker` the in-memory classes refuse (none today)."""
UNSUPPORTED_JOB_METHODS: frozenset[str] = frozenset()
"""Public methods of `Job` the in-memory classes refuse (none today)."""
UNSUPPORTED_WORKER_OPTIONS: frozenset[str] = frozenset({"sandbox"})
"""Worker options refused in memory: the sandbox's children live in other processes, which
an in-process server cannot reach."""


def unsupported(feature: str) -> UnsupportedOptionError:
    """The error for a feature glidemq.testing does not emulate."""
    return UnsupportedOptionError(
        feature, "not supported by glidemq.testing; test this against a real Valkey"
    )
