"""Every example in the user docs runs against a real Valkey.

A fenced ```python block whose first line is ``# example`` is an example: it is run as a
script with ``GLIDEMQ_URL`` pointing at a fresh, flushed server, and must exit 0. Blocks
without that line are fragments and are only shown.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ValkeyAddress

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    "USAGE.md",
    "WORKFLOWS.md",
    "ADVANCED.md",
    "SERVERLESS.md",
    "AI.md",
    "TASKS.md",
    "MIGRATING.md",
    "DEPLOY.md",
    "DURABLE.md",
)
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _examples() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name in DOCS:
        path = ROOT / "docs" / name
        if not path.exists():
            continue
        text = path.read_text()
        for match in FENCE.finditer(text):
            code = match.group(1)
            if code.startswith("# example"):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{name}:{line}", code))
    return found


EXAMPLES = _examples()


def test_the_docs_have_examples() -> None:
    assert EXAMPLES, "no '# example' blocks found in docs/"


def test_every_complete_glidemq_snippet_of_the_migration_guide_is_run() -> None:
    """In MIGRATING.md a block that imports glidemq and is not a one-off fragment of
    decorators must be an example, so what it shows is what runs."""
    text = (ROOT / "docs" / "MIGRATING.md").read_text()
    unrun = [
        text.count("\n", 0, m.start()) + 1
        for m in FENCE.finditer(text)
        if "import glidemq" in m.group(1) or "from glidemq" in m.group(1)
        if not m.group(1).startswith("# example")
    ]
    assert unrun == [], f"glidemq snippets of MIGRATING.md that are not run: lines {unrun}"


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_doc_example_runs(valkey_server: ValkeyAddress, where: str, code: str) -> None:
    valkey_server.cli("FLUSHALL")
    env = {**os.environ, "GLIDEMQ_URL": valkey_server.url}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
