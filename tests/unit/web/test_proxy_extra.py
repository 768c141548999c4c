"""The proxy's web stack is an optional extra: its command-line module (and so
`glidemq-proxy -h`) loads none of Starlette, uvicorn or httpx until it serves."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import glidemq.proxy.cli
glidemq.proxy.cli.build_parser()
loaded = sorted(m for m in ("starlette", "uvicorn", "httpx") if m in sys.modules)
print(",".join(loaded))
"""


def test_the_proxy_cli_imports_no_web_dependency_before_serving() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "", f"glidemq.proxy.cli imported {done.stdout.strip()}"
