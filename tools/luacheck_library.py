"""Run luacheck over the Valkey Function library (glidemq/lua/*.lua).

The files are checked joined, exactly as Valkey loads them (glidemq.client.functions.LIBRARY_FILES
order): each file uses locals of the files before it, which luacheck could not see in a file
alone, and an unused local is only unused when no later file uses it either. Warnings are
reported against the file and line they come from.

    python tools/luacheck_library.py             # fails when luacheck is missing
    python tools/luacheck_library.py --optional  # skips, with a note, when it is missing
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from glidemq.client.functions import library_parts

ROOT = Path(__file__).resolve().parent.parent
MISSING = "luacheck not installed: skipped (apt-get install lua-check)"
_LINE = re.compile(r"^stdin:(\d+):(\d+)(.*)$")
_ON_LINE = re.compile(r"on line (\d+)")


def where(line: int, parts: list[tuple[str, str]]) -> tuple[str, int]:
    """The file and line of a line number of the joined text (1-based)."""
    first = 1
    for name, text in parts:
        n = text.count("\n")
        if line < first + n:
            return f"glidemq/lua/{name}", line - first + 1
        first += n
    return "glidemq/lua/(end)", line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--optional", action="store_true", help="skip when luacheck is missing")
    opts = ap.parse_args()
    exe = shutil.which("luacheck")
    if exe is None:
        if opts.optional:
            print(MISSING)
            return 0
        print("luacheck not installed (apt-get install lua-check)", file=sys.stderr)
        return 2
    parts = library_parts()
    joined = "".join(text for _, text in parts)
    cmd = [exe, "--config", str(ROOT / ".luacheckrc"), "--formatter", "plain", "--codes", "-"]
    proc = subprocess.run(cmd, input=joined, capture_output=True, text=True, check=False)
    problems = 0
    for raw in proc.stdout.splitlines():
        m = _LINE.match(raw)
        if m:
            name, line = where(int(m.group(1)), parts)
            text = _ON_LINE.sub(
                lambda o: "on {}:{}".format(*where(int(o.group(1)), parts)), m.group(3)
            )
            print(f"{name}:{line}:{m.group(2)}{text}")
            problems += 1
        elif raw.strip():
            print(raw)
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    if proc.returncode == 0:
        print(f"luacheck: {len(parts)} library files, no warnings")
    else:
        print(f"luacheck: {problems} warning(s) or error(s) in the library")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
