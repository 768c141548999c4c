"""A task binds its call's arguments without `inspect` where the signature allows: the job
data and the errors are what `Signature.bind_partial` and the hint checks give."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import glidemq
from glidemq import TaskArgumentError


@glidemq.task("binding")
def plain(to: str, n: int = 1, *, flag: bool = False, extra: Any = None) -> None: ...


@glidemq.task("binding")
def varargs(to: str, *rest: int, **more: str) -> None: ...


@glidemq.task("binding")
def positional_only(to: str, /, n: int = 1) -> None: ...


def _slow(task: glidemq.Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The binding through inspect alone (the fast path switched off for this call)."""
    binder = task.__dict__.pop("_binder", None)
    task.__dict__["_binder"] = None
    try:
        return task.payload(*args, **kwargs)
    finally:
        task.__dict__["_binder"] = binder


def _outcome(bind: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return ("ok", bind(*args, **kwargs))
    except TaskArgumentError as exc:
        return ("error", exc.field, str(exc))


VALUES: list[Any] = ["a", 2, True, None, 1.5, [1], {"k": "v"}]
NAMES = ["to", "n", "flag", "extra", "bogus"]


@pytest.mark.parametrize("task", [plain, varargs, positional_only], ids=lambda t: t.name)
def test_every_call_binds_as_inspect_binds_it(task: glidemq.Task[Any, Any]) -> None:
    calls = 0
    for npos in range(4):
        for args in itertools.product(VALUES[:3], repeat=npos):
            for names in itertools.chain.from_iterable(
                itertools.combinations(NAMES, k) for k in range(3)
            ):
                for value in (VALUES[0], VALUES[1], VALUES[2], VALUES[5]):
                    kwargs = dict.fromkeys(names, value)
                    fast = _outcome(task.payload, *args, **kwargs)
                    slow = _outcome(_slow, task, args, kwargs)
                    assert fast == slow, (task.name, args, kwargs)
                    if fast[0] == "ok":
                        assert list(fast[1]) == list(slow[1])  # the same key order
                    calls += 1
    assert calls > 500


def test_the_binding_keeps_signature_order_and_checks_exact_types() -> None:
    assert list(plain.payload(flag=True, to="x", n=3)) == ["to", "n", "flag"]
    with pytest.raises(TaskArgumentError) as info:
        plain.payload("x", n=True)  # a bool is no int here
    assert info.value.field == "plain.n"
    with pytest.raises(TaskArgumentError) as info:
        plain.payload("x", "y")
    assert info.value.field == "plain.n"
    with pytest.raises(TaskArgumentError) as info:
        plain.payload("x", 1, 2)  # type: ignore[misc]
    assert "too many positional arguments" in str(info.value)
