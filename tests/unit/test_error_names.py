"""The error names that used to collide: the connection error is also the builtin one, and the
embedded server's error is its own class under the error tree."""

from __future__ import annotations

import builtins

import pytest

import glidemq
from glidemq import errors


def test_connection_error_is_the_builtin_connection_error_too() -> None:
    assert issubclass(glidemq.ConnectionError, builtins.ConnectionError)
    assert issubclass(glidemq.ConnectionError, glidemq.GlideMQError)
    # code written against the builtin catches ours, and code written against ours too
    with pytest.raises(builtins.ConnectionError, match="lost"):
        raise glidemq.ConnectionError("lost")
    with pytest.raises(glidemq.GlideMQError, match="lost"):
        raise glidemq.ConnectionError("lost")


def test_builtin_connection_error_is_not_taken_for_ours() -> None:
    assert not isinstance(builtins.ConnectionRefusedError(), glidemq.GlideMQError)


def test_embedded_server_error_is_one_class_under_the_error_tree() -> None:
    from glidemq.server import valkey as server

    assert issubclass(server.EmbeddedServerError, glidemq.GlideMQError)
    assert issubclass(server.EmbeddedServerError, RuntimeError)
    # not the engine's ServerError (a reply error from Valkey): a different concept
    assert not issubclass(server.EmbeddedServerError, glidemq.ServerError)
    assert "ServerError" not in server.__all__
    assert not hasattr(errors, "EmbeddedServerError")  # a tool's error, not the engine's


def test_old_embedded_server_error_import_still_works_with_a_warning() -> None:
    from glidemq.server import valkey as server

    with pytest.warns(DeprecationWarning, match="EmbeddedServerError"):
        old = server.ServerError
    assert old is server.EmbeddedServerError
