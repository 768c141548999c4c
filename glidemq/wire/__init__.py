"""The wire: one function per library function, building its KEYS and ARGV from typed
inputs and reading its reply.

Each function `f` of the Lua library has a `Layout` (`F`, in glidemq.wire.layout's registry),
a pure builder `f_call(...) -> Call`, and, where Python sends it alone, an async `f(ctx, ...)`
that sends it and parses the reply. Nothing else in glidemq names a library function
(glidemq.client.functions keeps the version and marker reads it needs to load the library).
Pipelined calls go through `QueueContext.pipeline`.
"""

from __future__ import annotations

from . import adds, features, fetch, flows, groups, ops, steps
from .layout import LAYOUTS, UNWRAPPED, Call, Layout, Sender, retry_safe_functions, send

__all__ = [
    "LAYOUTS",
    "RETRY_SAFE_FUNCTIONS",
    "UNWRAPPED",
    "Call",
    "Layout",
    "Sender",
    "adds",
    "features",
    "fetch",
    "flows",
    "groups",
    "ops",
    "send",
    "steps",
]

RETRY_SAFE_FUNCTIONS = retry_safe_functions()
"""Library functions that may run twice (see glidemq.client.retry)."""
