"""Fallback chains: a job lists other models to try when a try fails. Try n + 1 (after n
failed tries) sees entry n of the chain as `job.current_fallback`; the first try sees None.
Nothing new on the server: the chain is part of the job's options and the try number is the
job's `attemptsMade`, both stored in the job hash."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError

__all__ = ["Fallback", "check_fallbacks", "current_fallback"]

MAX_FALLBACKS = 100


@dataclass(frozen=True, slots=True)
class Fallback:
    """One entry of a fallback chain: a model and, optionally, its provider."""

    model: str
    provider: str | None = None

    def to_wire(self) -> dict[str, str]:
        out = {"model": self.model}
        if self.provider is not None:
            out["provider"] = self.provider
        return out


def _entry(i: int, value: object) -> Fallback:
    if isinstance(value, Fallback):
        value = value.to_wire()
    if not isinstance(value, Mapping):
        raise ValidationError(f"fallbacks[{i}]", "must be a mapping with 'model' (and 'provider')")
    unknown = set(value) - {"model", "provider"}
    if unknown:
        raise ValidationError(f"fallbacks[{i}]", f"unknown keys {sorted(unknown)}")
    model, provider = value.get("model"), value.get("provider")
    if not isinstance(model, str) or not model:
        raise ValidationError(f"fallbacks[{i}].model", "must be a non-empty string")
    if provider is not None and not isinstance(provider, str):
        raise ValidationError(f"fallbacks[{i}].provider", "must be a string or None")
    return Fallback(model, provider)


def check_fallbacks(value: object) -> tuple[Fallback, ...] | None:
    """The `fallbacks` option as a tuple of Fallback (None or empty: no chain)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError("fallbacks", "must be a list of {'model': ..., 'provider': ...}")
    if len(value) > MAX_FALLBACKS:
        raise ValidationError("fallbacks", f"at most {MAX_FALLBACKS} entries")
    chain = tuple(_entry(i, v) for i, v in enumerate(value))
    return chain or None


def current_fallback(opts: Mapping[str, Any], attempts_made: int) -> dict[str, Any] | None:
    """The chain entry the try after `attempts_made` failed tries uses (None: the first try,
    or no chain); tries past the chain keep its last entry."""
    chain = opts.get("fallbacks")
    if not chain or attempts_made < 1 or not isinstance(chain, list):
        return None
    entry = chain[min(attempts_made, len(chain)) - 1]
    return dict(entry) if isinstance(entry, Mapping) else None
