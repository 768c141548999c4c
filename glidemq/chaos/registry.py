"""The scenario registry: every module in `glidemq.chaos.scenarios` registers its scenarios.

Adding a scenario is adding a module there with a `@register`-ed `Scenario` subclass; the
`glidemq-chaos` subcommand and its place in `all` follow. `ORDER` fixes the order of `all`
and names the scenarios this build is expected to have: one that is missing (its module is
absent or fails to import) is reported by `all` as skipped, with the reason.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from typing import TypeVar

from .scenario import Scenario

__all__ = ["ORDER", "load_problems", "missing", "register", "scenarios"]

ORDER: tuple[str, ...] = (
    "kill-workers",
    "hang-worker",
    "sandbox-crash",
    "server-restart",
    "backlog",
    "failover",
    "network",
)

_SCENARIOS: dict[str, type[Scenario]] = {}
_LOAD_PROBLEMS: dict[str, str] = {}
_loaded = False

S = TypeVar("S", bound=type[Scenario])


def register(cls: S) -> S:
    """Class decorator: make a `Scenario` subclass a `glidemq-chaos` subcommand."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    other = _SCENARIOS.get(cls.name)
    if other is not None and other is not cls:
        raise ValueError(f"scenario {cls.name!r} registered twice: {other} and {cls}")
    _SCENARIOS[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # by name: the package attribute `scenarios` is the function below, not the subpackage
    package = importlib.import_module(f"{__package__}.scenarios")

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = f"{package.__name__}.{info.name}"
        try:
            importlib.import_module(module)
        except Exception as exc:
            # One broken scenario module must not take the others down.
            _LOAD_PROBLEMS[module] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def scenarios() -> dict[str, type[Scenario]]:
    """Registered scenarios by name, in `ORDER` first, then any others by name."""
    _load()
    names = [n for n in ORDER if n in _SCENARIOS]
    names += sorted(n for n in _SCENARIOS if n not in ORDER)
    return {n: _SCENARIOS[n] for n in names}


def load_problems() -> dict[str, str]:
    """Scenario modules that failed to import: module name -> error and traceback."""
    _load()
    return dict(_LOAD_PROBLEMS)


def missing() -> dict[str, str]:
    """Scenarios named in `ORDER` that are not registered, with the reason."""
    _load()
    out = {}
    for name in ORDER:
        if name in _SCENARIOS:
            continue
        module = f"glidemq.chaos.scenarios.{name.replace('-', '_')}"
        problem = _LOAD_PROBLEMS.get(module)
        if problem is not None:
            out[name] = f"{module} failed to import: {problem.splitlines()[0]}"
        else:
            out[name] = f"not part of this build ({module} does not exist)"
    return out
