"""What every library function takes: its name, how many KEYS and ARGV, whether a retry is
safe. The wire modules build each call through its `Layout`, so the layouts here are the
whole Python side of the wire; tests/unit/wire/test_wire_layout.py holds them against the
`-- @wire` header of each Lua function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

__all__ = [
    "LAYOUTS",
    "UNWRAPPED",
    "Call",
    "Layout",
    "Sender",
    "layout",
    "retry_safe_functions",
    "send",
]


class Call(NamedTuple):
    """One FCALL ready to send: function name, KEYS, ARGV, and whether it may run twice."""

    function: str
    keys: list[str]
    args: list[str | bytes]
    safe: bool


class Sender(Protocol):
    """What sends a call: a QueueContext, or `context.ClientSender` over a bare client."""

    async def fcall(
        self,
        function: str,
        keys: Sequence[str],
        args: Sequence[str | bytes],
        *,
        safe: bool = False,
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class Layout:
    """A library function's shape. `keys` and `args` use the Lua headers' notation: `N`,
    `N..M` or `N..` (at least N). `safe`: running it twice does no harm, so it is retried
    after an ambiguous failure (see glidemq.client.retry)."""

    name: str
    keys: str
    args: str
    safe: bool = False

    def call(self, keys: list[str], args: list[str | bytes], safe: bool | None = None) -> Call:
        """The call of this function with these KEYS and ARGV."""
        return Call(self.name, keys, args, self.safe if safe is None else safe)


LAYOUTS: dict[str, Layout] = {}
"""Every wrapped library function's layout, by name."""

UNWRAPPED: dict[str, str] = {
    "glidemq_version": "read by glidemq.client.functions when it loads the library (all primaries)",
    "glidemq_library": "the ownership marker glidemq.client.functions asks before loading",
    "glidemq_addFlow": "the documented flow call for raw producers; FlowProducer uses "
    "glidemq_addTree (DAGs, several queues)",
    "glidemq_nextDue": "for raw consumers polling the delayed set; our workers learn the next "
    "due time from glidemq_promote",
}
"""Library functions with no wrapper here, and why."""


def layout(name: str, *, keys: str, args: str, safe: bool = False) -> Layout:
    """Declare (and register) a function's layout."""
    if name in LAYOUTS or name in UNWRAPPED:
        raise ValueError(f"{name} declared twice")
    found = LAYOUTS[name] = Layout(name, keys, args, safe)
    return found


async def send(sender: Sender, call: Call) -> Any:
    """Send `call`; its reply as valkey-glide gives it."""
    return await sender.fcall(call.function, call.keys, call.args, safe=call.safe)


def retry_safe_functions() -> frozenset[str]:
    """Names of the functions that may run twice (the reads in glidemq.client.functions too)."""
    return frozenset(n for n, lay in LAYOUTS.items() if lay.safe) | {
        "glidemq_version",
        "glidemq_library",
    }
