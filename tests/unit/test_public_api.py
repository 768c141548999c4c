"""The public surface of `import glidemq`: exported names, typing marker, the error tree."""

from __future__ import annotations

import importlib
import inspect
from importlib import metadata, resources

import pytest

import glidemq
from glidemq import errors
from glidemq.client.functions import LIBRARY_FILES

_CORE_MODULES = (
    "glidemq.broadcast",
    "glidemq.client.connection",
    "glidemq.client.context",
    "glidemq.client.functions",
    "glidemq.encoding.serialize",
    "glidemq.errors",
    "glidemq.events",
    "glidemq.flows",
    "glidemq.job",
    "glidemq.keys",
    "glidemq.queue",
    "glidemq.server",
    "glidemq.types",
    "glidemq.worker",
)


def _exported_exceptions() -> list[type[BaseException]]:
    out = []
    for name in glidemq.__all__:
        obj = getattr(glidemq, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            out.append(obj)
    return out


def test_every_name_in_all_exists() -> None:
    missing = [name for name in glidemq.__all__ if not hasattr(glidemq, name)]
    assert missing == []
    assert len(set(glidemq.__all__)) == len(glidemq.__all__), "duplicate names in __all__"


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from glidemq import *", namespace)
    exported = {name for name in namespace if name != "__builtins__"}
    assert exported == set(glidemq.__all__)


def test_core_classes_are_exported() -> None:
    for name in ("Queue", "Worker", "Job", "QueueEvents", "JobOptions", "WorkerOptions"):
        assert name in glidemq.__all__
        assert inspect.isclass(getattr(glidemq, name))


@pytest.mark.parametrize("module_name", _CORE_MODULES)
def test_submodule_all_names_exist(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    assert names, f"{module_name} declares no __all__"
    assert [n for n in names if not hasattr(module, n)] == []


def test_py_typed_marker_ships() -> None:
    marker = resources.files("glidemq").joinpath("py.typed")
    assert marker.is_file()


def test_function_library_ships_as_package_data() -> None:
    lua = resources.files("glidemq").joinpath("lua")
    for name in LIBRARY_FILES:
        assert lua.joinpath(name).is_file(), name
    assert (
        lua.joinpath(LIBRARY_FILES[0]).read_text(encoding="utf-8").startswith("#!lua name=glidemq")
    )


def test_version_matches_distribution_metadata() -> None:
    try:
        installed = metadata.version("glidemq")
    except metadata.PackageNotFoundError:
        pytest.skip("glidemq is not installed as a distribution; no metadata to compare")
    assert glidemq.__version__ == installed


def test_glidemq_error_is_the_root() -> None:
    assert issubclass(glidemq.GlideMQError, Exception)
    assert glidemq.GlideMQError.__bases__ == (Exception,)


def test_every_exported_exception_derives_from_glidemq_error() -> None:
    exceptions = _exported_exceptions()
    assert len(exceptions) >= 10
    for exc_type in exceptions:
        assert issubclass(exc_type, glidemq.GlideMQError), exc_type.__name__


def test_every_error_in_errors_module_derives_from_glidemq_error() -> None:
    for name in errors.__all__:
        exc_type = getattr(errors, name)
        assert issubclass(exc_type, glidemq.GlideMQError), name
        assert getattr(glidemq, name) is exc_type, f"{name} is not re-exported"


def test_errors_also_subclass_the_matching_builtin() -> None:
    assert issubclass(glidemq.ValidationError, ValueError)
    assert issubclass(glidemq.PayloadTooLargeError, glidemq.ValidationError)
    assert issubclass(glidemq.UnsupportedOptionError, glidemq.ValidationError)
    assert issubclass(glidemq.JobNotFoundError, LookupError)
    assert issubclass(glidemq.JobTimeoutError, TimeoutError)
    assert issubclass(glidemq.LibraryError, glidemq.ServerError)


def test_connection_error_is_its_own_class_and_also_the_builtin() -> None:
    # a class of its own (in the GlideMQError tree) that the builtin's handlers also catch
    # (tests/unit/test_error_names.py has the rest)
    assert glidemq.ConnectionError is not ConnectionError
    assert issubclass(glidemq.ConnectionError, ConnectionError)


def test_error_constructors_keep_their_details() -> None:
    v = glidemq.ValidationError("delay", "must be >= 0")
    assert (v.field, v.reason) == ("delay", "must be >= 0")
    assert "delay" in str(v)
    big = glidemq.PayloadTooLargeError(2_000_000, 1_048_576)
    assert big.field == "data" and big.size == 2_000_000 and big.limit == 1_048_576
    nf = glidemq.JobNotFoundError("emails", "42")
    assert (nf.queue, nf.job_id) == ("emails", "42")
    st = glidemq.JobStateError("42", "remove", "it is running")
    assert st.job_id == "42" and st.operation == "remove" and "running" in str(st)
    batch = glidemq.BatchError([1, ValueError("x")])
    assert len(batch.results) == 2
