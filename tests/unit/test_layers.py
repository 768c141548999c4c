"""The core's import graph has no cycle, not even one hidden behind a function-level or a
TYPE_CHECKING import: every module can be read, tested and replaced from the bottom up.
(The layer order itself is the import-linter contract in pyproject.toml, which `make test`
runs; this test is the cycle check the contract cannot express between siblings.)"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import grimp

import glidemq

# Tools and faces may lean on each other; the engine must not.
_OUTSIDE_CORE = (
    "glidemq.bench",
    "glidemq.chaos",
    "glidemq.spark",
    "glidemq.testing",
    "glidemq.server",
)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
                continue
            if child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_core_has_no_import_cycle() -> None:
    graph = grimp.build_graph("glidemq", include_external_packages=False)
    core = {
        m for m in graph.modules if not any(m == o or m.startswith(o + ".") for o in _OUTSIDE_CORE)
    }
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & core for m in core}
    cycles = _cycles(edges)
    details = []
    for comp in cycles:
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                lines = graph.get_import_details(importer=a, imported=b)
                where = ", ".join(f"l.{d['line_number']}" for d in lines)
                details.append(f"{a} -> {b} ({where})")
    assert not cycles, "import cycles in the core:\n" + "\n".join(details)


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    chain = {str(i): {str(i + 1)} for i in range(5000)} | {"5000": {"0"}}
    assert len(_cycles(chain)[0]) == 5001


_PACKAGE = Path(glidemq.__file__).parent
_TOP_LEVEL_MODULES_AT_MOST = 15


def _top_level() -> tuple[list[str], list[str]]:
    modules = sorted(p.stem for p in _PACKAGE.glob("*.py") if p.name != "__init__.py")
    packages = sorted(p.name for p in _PACKAGE.iterdir() if (p / "__init__.py").is_file())
    return modules, packages


def test_the_top_level_is_a_table_of_contents() -> None:
    modules, _ = _top_level()
    assert len(modules) <= _TOP_LEVEL_MODULES_AT_MOST, modules


def test_every_part_is_on_the_map_and_in_the_layers() -> None:
    modules, packages = _top_level()
    text = (_PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    contract = tomllib.loads((_PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    layers = contract["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {part.strip() for layer in layers for part in layer.split("|")}
    for name in modules:
        assert f"{name}.py" in text, f"docs/ARCHITECTURE.md does not name {name}.py"
        assert name in named, f"{name} is in no layer of the import-linter contract"
    for name in packages:
        assert f"{name}/" in text, f"docs/ARCHITECTURE.md does not name {name}/"
        assert name in named, f"{name} is in no layer of the import-linter contract"


def test_every_subpackage_says_what_it_is() -> None:
    _, packages = _top_level()
    for name in packages:
        module = importlib.import_module(f"glidemq.{name}")
        assert (module.__doc__ or "").strip(), f"glidemq.{name} has no docstring"
