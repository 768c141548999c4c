"""What a benchmark script imports: the scripts given to valkey-glide's maintainers must
run without glidemq installed."""

from __future__ import annotations

import ast
from pathlib import Path


def top_level_imports(script: Path) -> set[str]:
    """The top-level packages `script` imports, anywhere in it."""
    tree = ast.parse(script.read_text())
    plain = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    return plain | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
