"""The shipped function library file and the version/checksum pinned in glidemq.functions."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from glidemq import functions
from glidemq.functions import LIBRARY_SOURCE_SHA256, LIBRARY_VERSION, library_source
from tests.lua_headers import Arity, registered_functions, wire_headers


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


_SHAPE = re.compile(r"shape\((?:'\w+'|fname), keys, args, (nil|\d+), (\d+)(?:, (\d+))?\)")


def test_every_function_has_a_wire_header_that_matches_its_own_checks() -> None:
    src = library_source()
    headers = wire_headers(src)
    names = registered_functions(src)
    assert sorted(headers) == sorted(names), "every registered function needs one @wire header"
    for name in names:
        # The header sits directly above the registration.
        at = src.index(f"'{name}'")
        line_start = src.rindex("\n", 0, at) + 1
        above = src[src.rindex("\n", 0, line_start - 1) + 1 : line_start - 1]
        assert above.startswith(f"-- @wire {name} "), name
        body_end = src.find("\nredis.register_function", at)
        m = _SHAPE.search(src, at, body_end if body_end > 0 else len(src))
        h = headers[name]
        if m is None:
            continue  # checked by hand in the function (glidemq_version, glidemq_library)
        nk, amin, amax = m.groups()
        want_keys = Arity(1, None) if nk == "nil" else Arity(int(nk), int(nk))
        assert h.keys == want_keys, f"{name}: header keys {h.keys}, shape() {want_keys}"
        want_args = Arity(int(amin), int(amax) if amax else None)
        assert h.args == want_args, f"{name}: header args {h.args}, shape() {want_args}"
