"""luacheck passes over the Lua library, checked as the one text Valkey loads."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "luacheck_library.py"


def test_luacheck_finds_nothing_in_the_library() -> None:
    if shutil.which("luacheck") is None:
        pytest.skip("luacheck not installed (apt-get install lua-check)")
    proc = subprocess.run(
        [sys.executable, str(TOOL)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no warnings" in proc.stdout


def test_luacheck_settings_suppress_no_warnings() -> None:
    settings = [
        line.split("=")[0].strip()
        for line in (ROOT / ".luacheckrc").read_text().splitlines()
        if "=" in line and not line.startswith("--")
    ]
    # the globals Valkey gives, the Lua version and the line length; nothing switched off
    assert sorted(settings) == ["max_line_length", "read_globals", "std"]
