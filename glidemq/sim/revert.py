"""Proving the simulator finds a defect: patch a fix out, hunt for the violation.

    with reverted("glidemq.worker.worker:Worker._fail", old_fail):
        found = hunt("tries-overlap")
    assert found is not None, "the simulator no longer finds the defect 5dc2e01 fixed"

`reverted` puts a named function (or any attribute) back to its old behaviour while the
block runs; `lua_reverted` does the same for a fix in the function library, by replacing the
fixed text with the old one in the source the servers of the simulation load; `hunt` runs
seeds, on every core (the processes fork, so they see the patch),
until one of them breaks the named invariant. tests/sim/test_reverts.py keeps one entry per
fixed defect; adding a fix's revert test is adding its old function and its invariant there.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..client import functions
from .cli import SeedSummary, run_many

__all__ = ["DEFAULT_BUDGET", "hunt", "lua_reverted", "reverted"]

DEFAULT_BUDGET = 200
"""Seeds a revert test may run before the defect must have shown (what `make test` runs)."""


@contextmanager
def reverted(target: str, old: Any) -> Iterator[None]:
    """While the block runs, `module:Name.attr` is `old` (the fix patched out)."""
    module_name, _, path = target.partition(":")
    if not path:
        raise ValueError(f"expected 'module:Name.attr', got {target!r}")
    owner: Any = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    had = name in vars(owner) if isinstance(owner, type) else True
    saved = vars(owner)[name] if isinstance(owner, type) and had else getattr(owner, name)
    setattr(owner, name, old)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, saved)
        else:
            delattr(owner, name)


@contextmanager
def lua_reverted(*edits: tuple[str, str]) -> Iterator[None]:
    """While the block runs, the library loaded into a server is the shipped one with each
    `(fixed, old)` text replaced: the fix patched out of the Lua. Raises ValueError when a
    fixed text is not in the source (the fix changed: the revert must follow it)."""
    shipped = functions.library_source()
    src = shipped
    for fixed, old in edits:
        if src.count(fixed) != 1:
            raise ValueError(f"the library does not hold this text exactly once: {fixed!r}")
        src = src.replace(fixed, old)
    with reverted("glidemq.client.functions:library_source", lambda: src):
        yield


def hunt(
    invariant: str,
    seeds: Iterable[int] = range(DEFAULT_BUDGET),
    faults: str = "all",
    procs: int | None = None,
) -> SeedSummary | None:
    """The first seed (in order) that breaks `invariant`, or None within `seeds`."""
    found = None
    runs = run_many(list(seeds), faults, procs)
    for summary in runs:
        if any(v.invariant == invariant for v in summary.violations):
            found = summary
            break
    close = getattr(runs, "close", None)
    if close is not None:
        close()  # stops the pool at once
    return found
