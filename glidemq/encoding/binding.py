"""A task's call bound to its signature: which stored entry a parameter's value goes to,
with the type hint it is checked by (`param_hint`), and a fast path (`Binder`) for the
common signature, read once, that binds a call without `inspect`."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import payload

__all__ = ["Binder", "param_hint"]


def param_hint(param: inspect.Parameter, hints: Mapping[str, Any]) -> Any:
    """The hint of the value stored for a parameter: `*args: int` holds a tuple of ints,
    `**kw: str` a dict of str."""
    hint = hints.get(param.name, Any)
    if param.kind is param.VAR_POSITIONAL:
        return tuple[hint, ...]  # type: ignore[valid-type]
    if param.kind is param.VAR_KEYWORD:
        return dict[str, hint]  # type: ignore[valid-type]
    return hint


# Hints whose check is "the value has exactly this type" (bool is no int here, as in encode).
_EXACT_TYPES = (str, int, bool)


@dataclass(frozen=True)
class Binder:
    """A signature without `*args`, `**kwargs` or positional-only parameters, read once: a
    call that fits it is bound without `inspect`, as `Signature.bind_partial` would bind it."""

    positional: tuple[str, ...]  # the parameters a positional argument may fill, in order
    order: tuple[str, ...]  # every parameter, in order
    required: frozenset[str]
    checks: Mapping[str, tuple[Any, str, bool]]  # name -> (hint, where, the type is the check)

    @classmethod
    def of(cls, task: str, sig: inspect.Signature, hints: Mapping[str, Any]) -> Binder | None:
        params = list(sig.parameters.values())
        if any(p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params):
            return None
        return cls(
            positional=tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD),
            order=tuple(p.name for p in params),
            required=frozenset(p.name for p in params if p.default is p.empty),
            checks={p.name: cls._check(p, hints, task) for p in params},
        )

    @staticmethod
    def _check(
        param: inspect.Parameter, hints: Mapping[str, Any], task: str
    ) -> tuple[Any, str, bool]:
        hint = param_hint(param, hints)
        return hint, f"{task}.{param.name}", hint in _EXACT_TYPES

    def payload(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The checked job data, or None when the call does not fit (the caller's slow path
        then says why)."""
        if len(args) > len(self.positional):
            return None
        got = dict(zip(self.positional, args, strict=False))
        if kwargs:
            if not kwargs.keys() <= self.checks.keys() or not got.keys().isdisjoint(kwargs):
                return None
            got.update(kwargs)
        if not self.required <= got.keys():
            return None
        checks, encode = self.checks, payload.encode_argument
        out = {}
        for name in self.order:
            if name in got:
                value = got[name]
                hint, where, exact = checks[name]
                out[name] = value if exact and type(value) is hint else encode(value, hint, where)
        return out
