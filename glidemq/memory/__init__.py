"""A server in this process for glidemq's front end: the key space, glidemq's own function
library run on it in Lua, and a client with valkey-glide's methods.

`MemoryServer(clock=...)` stands where a Valkey server stands; `server.options` is the
connection that reaches it. glidemq.testing builds its test classes on it.
"""

from __future__ import annotations

from .clock import Clock, ManualClock, SystemClock
from .server import MemoryServer

__all__ = ["Clock", "ManualClock", "MemoryServer", "SystemClock"]
