"""The shipped function library file and the version/checksum pinned in glidemq.functions."""

from __future__ import annotations

import hashlib
from importlib import resources

from glidemq import functions
from glidemq.functions import LIBRARY_SOURCE_SHA256, LIBRARY_VERSION, library_source


def _shipped_bytes() -> bytes:
    return resources.files("glidemq").joinpath("lua/glidemq.lua").read_bytes()


def test_source_sha256_matches_the_shipped_lua_file() -> None:
    actual = hashlib.sha256(_shipped_bytes()).hexdigest()
    assert actual == LIBRARY_SOURCE_SHA256, (
        "glidemq/lua/glidemq.lua changed: bump LIBRARY_VERSION and update LIBRARY_SOURCE_SHA256 "
        f"in glidemq/functions.py (the new sha256 is {actual})"
    )
    assert functions.source_sha256() == actual


def test_loaded_source_carries_the_version_and_no_placeholder() -> None:
    src = library_source()
    assert src.startswith("#!lua name=glidemq\n")
    assert "__GLIDEMQ_LIBRARY_VERSION__" not in src
    assert f"local LIBRARY_VERSION = '{LIBRARY_VERSION}'" in src
    # The shipped file keeps the placeholder; only the loaded text has the number.
    assert "__GLIDEMQ_LIBRARY_VERSION__" in _shipped_bytes().decode()


def test_library_registers_the_documented_functions() -> None:
    src = library_source()
    for name in (
        "glidemq_version",
        "glidemq_addJob",
        "glidemq_dedup",
        "glidemq_pause",
        "glidemq_resume",
    ):
        assert f"'{name}'" in src, name
