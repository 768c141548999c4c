"""Reads the `-- @wire NAME keys=K args=A` header above each function of the Lua library.

K and A are `N` (exactly N), `N..M` (N to M) or `N..` (at least N). The wire-layout tests
compare these headers with the Lua code's own checks and with the Python wrappers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(r"^-- @wire (glidemq_\w+) keys=(\S+) args=(\S+)$", re.M)
_REGISTER = re.compile(
    r"^redis\.register_function\s*[({]\s*(?:function_name\s*=\s*)?'(glidemq_\w+)'", re.M
)


@dataclass(frozen=True)
class Arity:
    """An inclusive range of counts; `high` is None when open-ended."""

    low: int
    high: int | None

    @classmethod
    def parse(cls, text: str) -> Arity:
        lo, sep, hi = text.partition("..")
        if not sep:
            return cls(int(lo), int(lo))
        return cls(int(lo), int(hi) if hi else None)

    def allows(self, n: int) -> bool:
        return n >= self.low and (self.high is None or n <= self.high)


@dataclass(frozen=True)
class WireHeader:
    name: str
    keys: Arity
    args: Arity


def wire_headers(source: str) -> dict[str, WireHeader]:
    """Every `@wire` header of the library source, by function name."""
    out: dict[str, WireHeader] = {}
    for m in _HEADER.finditer(source):
        name = m.group(1)
        if name in out:
            raise AssertionError(f"two @wire headers for {name}")
        out[name] = WireHeader(name, Arity.parse(m.group(2)), Arity.parse(m.group(3)))
    return out


def registered_functions(source: str) -> list[str]:
    """The names the library registers, in source order."""
    return [m.group(1) for m in _REGISTER.finditer(source)]
