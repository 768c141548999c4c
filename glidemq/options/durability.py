"""Durability: what the server must confirm before a state change is acknowledged.

`Durability("replicated", replicas=1, timeout_ms=1000)` makes every call that changes a job
wait (WAIT) until that many replicas have it; `Durability("fsync")` waits (WAITAOF) until the
server's append-only file has it on disk. Calls sent together (a batch, a pipeline) wait once.
docs/DURABILITY.md says what either promises and what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ..errors import ValidationError
from .checks import check_int

__all__ = ["DEFAULT_DURABILITY_TIMEOUT_MS", "Durability", "DurabilityLike", "coerce_durability"]

DEFAULT_DURABILITY_TIMEOUT_MS = 1000
"""How long a write waits for its confirmation by default."""

_MODES = ("replicated", "fsync")
_OFF = ("", "none", "off", "async")


@dataclass(frozen=True, slots=True)
class Durability:
    """`mode` "replicated": a write is acknowledged once `replicas` replicas (default 1)
    received it (WAIT). "fsync": once the server's AOF has it on disk (WAITAOF; needs
    `appendonly yes`), and with `replicas` > 0 the AOF of that many replicas too.
    `timeout_ms`: how long to wait before the call fails with DurabilityTimeoutError."""

    mode: Literal["replicated", "fsync"] = "replicated"
    replicas: int | None = None
    timeout_ms: int = DEFAULT_DURABILITY_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValidationError("durability", f"must be one of {', '.join(_MODES)}")
        replicas = (
            (1 if self.mode == "replicated" else 0) if self.replicas is None else self.replicas
        )
        low = 1 if self.mode == "replicated" else 0
        object.__setattr__(self, "replicas", check_int("replicas", replicas, low=low, high=64))
        check_int("durability_timeout_ms", self.timeout_ms, low=1, high=3_600_000)

    @property
    def wanted(self) -> int:
        """Replicas that must confirm (for "fsync": besides the local AOF)."""
        assert self.replicas is not None
        return self.replicas

    def command(self) -> list[str]:
        """The command that waits: WAIT or WAITAOF, with this option's numbers."""
        if self.mode == "replicated":
            return ["WAIT", str(self.wanted), str(self.timeout_ms)]
        return ["WAITAOF", "1", str(self.wanted), str(self.timeout_ms)]

    def confirmed(self, reply: Any) -> tuple[bool, str]:
        """Whether the waiting command's reply meets the option, and what it saw."""
        if self.mode == "replicated":
            acked = int(reply)
            return acked >= self.wanted, f"{acked} of {self.wanted} replica(s)"
        local, replicas = (int(x) for x in reply)
        seen = f"local AOF {'yes' if local else 'no'}, {replicas} of {self.wanted} replica AOF(s)"
        return bool(local) and replicas >= self.wanted, seen

    def describe(self) -> str:
        """`replicated(replicas=1, timeout_ms=1000)`, for messages and logs."""
        return f"{self.mode}(replicas={self.wanted}, timeout_ms={self.timeout_ms})"


DurabilityLike: TypeAlias = "Durability | str | None"
"""What the durability options take: a Durability, a mode name, or None (off)."""


def coerce_durability(
    value: object, *, replicas: int | None = None, timeout_ms: int | None = None
) -> Durability | None:
    """A Durability from a Durability, a mode name ("replicated", "fsync"; "none" or None
    for off) and optional `replicas` / `timeout_ms`; ValidationError for anything else."""
    if isinstance(value, Durability):
        if replicas is None and timeout_ms is None:
            return value
        return Durability(
            value.mode,
            value.replicas if replicas is None else replicas,
            value.timeout_ms if timeout_ms is None else timeout_ms,
        )
    if value is None or (isinstance(value, str) and value.lower() in _OFF):
        if replicas is not None or timeout_ms is not None:
            raise ValidationError("durability", "replicas and a timeout need a durability mode")
        return None
    if isinstance(value, str) and value.lower() in _MODES:
        mode: Literal["replicated", "fsync"] = (
            "replicated" if value.lower() == "replicated" else "fsync"
        )
        return Durability(
            mode, replicas, DEFAULT_DURABILITY_TIMEOUT_MS if timeout_ms is None else timeout_ms
        )
    raise ValidationError(
        "durability", f"expected 'replicated', 'fsync', 'none' or a Durability, got {value!r}"
    )
