"""The dashboard's web stack is an optional extra: importing the engine, the admin layer or
the command-line tools loads none of Starlette, uvicorn or Jinja2."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import glidemq, glidemq.admin, glidemq.admin.session, glidemq.admin.cli, glidemq.runtime.cli
loaded = sorted(m for m in ("starlette", "uvicorn", "jinja2", "httpx") if m in sys.modules)
print(",".join(loaded))
"""


def test_the_core_imports_no_web_dependency() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "", f"the core imported {done.stdout.strip()}"
