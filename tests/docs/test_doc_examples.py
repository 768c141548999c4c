"""Every example in the user docs runs against a real Valkey.

A fenced ```python block whose first line is ``# example`` is an example: it is run as a
script with ``GLIDEMQ_URL`` pointing at a fresh, flushed server, and must exit 0. Blocks
without that line are fragments and are only shown. An example leaves no job behind that
it did not mean to: none still running, none left waiting on a queue its worker served,
and none failed for a reason the example does not raise itself (a job no task of the
example runs, an argument that does not fit, ...).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import valkey

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
    left = _left_behind(valkey_server, code)
    assert left == [], f"{where} left jobs behind: {left}\n{done.stdout}\n{done.stderr}"


_CHILD_FAILED = re.compile(r"^child \S+ failed: ")  # a parent failed by its child's failure
_QUEUE_KEY = re.compile(r"^glide:\{(?P<queue>[^}]*)\}:(?P<kind>failed|stream)$")


def _left_behind(server: ValkeyAddress, code: str) -> list[str]:
    """Jobs still running after the example, jobs left waiting on a queue a worker of the
    example served, and jobs failed for a reason its code does not name (for a parent
    failed by its child, the child's reason)."""
    client = valkey.Valkey(host=server.host, port=server.port)
    found: list[str] = []
    try:
        for raw in client.scan_iter("glide:*", count=1000):
            match = _QUEUE_KEY.match(raw.decode())
            if match is None:
                continue
            base = raw.decode().removesuffix(match["kind"])
            if match["kind"] == "stream" and client.type(raw) == b"stream":
                groups = {g["name"]: g for g in client.xinfo_groups(raw)}
                served = groups.get(b"workers", {}).get("consumers", 0) > 0
                pending = client.xpending(raw, "workers")["pending"] if served else 0
                waiting = client.xlen(raw) - pending  # finished entries are deleted
                if pending:
                    found.append(f"{match['queue']}: {pending} job(s) still active")
                if served and waiting:  # a worker ran on the queue, and left these
                    found.append(f"{match['queue']}: {waiting} job(s) left waiting")
            elif match["kind"] == "failed" and client.type(raw) == b"zset":
                for job_id in client.zrange(raw, 0, -1):
                    name, reason = client.hmget(
                        f"{base}job:{job_id.decode()}", "name", "failedReason"
                    )
                    text = (reason or b"").decode(errors="replace")
                    if _CHILD_FAILED.sub("", text) not in code:
                        found.append(
                            f"{match['queue']}:{job_id.decode()} ({name!r}) failed: {text}"
                        )
    finally:
        client.close()
    return found
