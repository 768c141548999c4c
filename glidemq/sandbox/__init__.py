"""The sandbox pool: processors in child processes, jobs over IPC, job methods proxied back.

    from glidemq import Worker
    from glidemq.sandbox import SandboxOptions

    worker = Worker("images", "app.tasks:resize", sandbox=SandboxOptions(max_children=4))

See docs/SANDBOX.md for the design, the limits, and what a sandbox does not protect against.
"""

from __future__ import annotations

from .errors import (
    RemoteError,
    SandboxBootError,
    SandboxClosedError,
    SandboxCrashError,
    SandboxError,
)
from .job import SandboxJob
from .pool import SandboxPool
from .protocol import PROTOCOL_VERSION, register_error
from .types import DEFAULT_ATTR, SandboxOptions

__all__ = [
    "DEFAULT_ATTR",
    "PROTOCOL_VERSION",
    "RemoteError",
    "SandboxBootError",
    "SandboxClosedError",
    "SandboxCrashError",
    "SandboxError",
    "SandboxJob",
    "SandboxOptions",
    "SandboxPool",
    "register_error",
]
