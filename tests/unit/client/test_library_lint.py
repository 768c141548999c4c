"""luacheck passes over the Lua library, checked as the one text Valkey loads."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
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


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("luacheck_library", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_line_of_the_joined_text_is_reported_against_its_own_file() -> None:
    where = _tool().where
    parts = [("a.lua", "1\n2\n3\n"), ("b.lua", "1\n2\n")]
    assert where(1, parts) == ("glidemq/lua/a.lua", 1)
    assert where(3, parts) == ("glidemq/lua/a.lua", 3)
    assert where(4, parts) == ("glidemq/lua/b.lua", 1)
    assert where(5, parts) == ("glidemq/lua/b.lua", 2)
