"""The function library's source files and the version/checksum pinned in
glidemq.client.functions."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from glidemq.client import functions
from glidemq.client.functions import (
    LIBRARY_FILES,
    LIBRARY_SOURCE_SHA256,
    LIBRARY_VERSION,
    library_parts,
    library_source,
)
from tests.lua_headers import Arity, registered_functions, wire_headers

_PLACEHOLDER = "__GLIDEMQ_LIBRARY_VERSION__"


def _shipped_files() -> dict[str, bytes]:
    """Every .lua file in the package's lua/ directory, by name."""
    lua = resources.files("glidemq").joinpath("lua")
    return {f.name: f.read_bytes() for f in lua.iterdir() if f.name.endswith(".lua")}


def test_loaded_text_is_the_listed_files_joined_in_order() -> None:
    files = _shipped_files()
    assert sorted(files) == sorted(LIBRARY_FILES), "every .lua file of glidemq/lua/ is listed"
    assert len(set(LIBRARY_FILES)) == len(LIBRARY_FILES)
    joined = b"".join(files[name] for name in LIBRARY_FILES).decode()
    assert [name for name, _ in library_parts()] == list(LIBRARY_FILES)
    assert functions.raw_library_source() == joined
    assert library_source() == joined.replace(_PLACEHOLDER, str(LIBRARY_VERSION))
    for name in LIBRARY_FILES:
        # a file that did not end its last line would run into the next file's first
        assert files[name].endswith(b"\n"), f"{name} must end with a newline"


def test_source_sha256_matches_the_joined_lua_files() -> None:
    joined = b"".join(_shipped_files()[name] for name in LIBRARY_FILES)
    actual = hashlib.sha256(joined).hexdigest()
    assert actual == LIBRARY_SOURCE_SHA256, (
        "glidemq/lua/*.lua changed: bump LIBRARY_VERSION and update LIBRARY_SOURCE_SHA256 "
        f"in glidemq/client/functions.py (the new sha256 is {actual})"
    )
    assert functions.source_sha256() == actual


def test_shebang_and_placeholder_appear_once() -> None:
    parts = dict(library_parts())
    first = LIBRARY_FILES[0]
    assert parts[first].startswith("#!lua name=glidemq\n")
    assert _PLACEHOLDER in parts[first]
    for name, text in parts.items():
        if name != first:
            assert "#!lua" not in text, name
            assert _PLACEHOLDER not in text, name
    assert functions.raw_library_source().count(_PLACEHOLDER) == 1


def test_loaded_source_carries_the_version_and_no_placeholder() -> None:
    src = library_source()
    assert src.startswith("#!lua name=glidemq\n")
    assert src.count("#!lua") == 1
    assert _PLACEHOLDER not in src
    assert f"local LIBRARY_VERSION = '{LIBRARY_VERSION}'" in src


def test_library_registers_the_documented_functions() -> None:
    src = library_source()
    for name in (
        "glidemq_version",
        "glidemq_addJob",
        "glidemq_dedup",
        "glidemq_addFlow",
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
