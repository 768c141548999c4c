"""Task arguments as job data: every supported hint round-trips through JSON, and a value
that does not fit names the argument and the path inside it."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypedDict

import orjson
import pytest

import glidemq
from glidemq import Backoff, KeepJobs, TaskArgumentError, UnrecoverableError, ValidationError
from glidemq.encoding.payload import decode, encode


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Item:
    sku: str
    qty: int = 1


@dataclass
class Order:
    id: uuid.UUID
    items: list[Item]
    placed: dt.datetime
    tags: set[str] = field(default_factory=set)
    note: str | None = None


class Totals(TypedDict):
    net: Decimal
    lines: int


def roundtrip(value: Any, hint: Any) -> Any:
    data = orjson.loads(orjson.dumps(encode(value, hint, "t.arg")))
    return decode(data, hint, "t.arg")


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (3, int),
        (2.5, float),
        ("x", str),
        (True, bool),
        (None, None),
        ([1, 2], list[int]),
        ((1, "a"), tuple[int, str]),
        ((1, 2, 3), tuple[int, ...]),
        ({"a": 1}, dict[str, int]),
        ({"a": [1]}, Mapping[str, Sequence[int]]),
        (frozenset({1, 2}), frozenset[int]),
        ("blue", Literal["red", "blue"]),
        (Colour.RED, Colour),
        (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), dt.datetime),
        (dt.date(2026, 1, 2), dt.date),
        (dt.time(3, 4), dt.time),
        (uuid.UUID(int=7), uuid.UUID),
        (Decimal("1.10"), Decimal),
        (None, int | None),
        (4, int | None),
        ({"k": "v"}, Any),
    ],
)
def test_values_round_trip(value: Any, hint: Any) -> None:
    assert roundtrip(value, hint) == value


def test_a_dataclass_round_trips_with_nested_values() -> None:
    order = Order(
        uuid.uuid4(), [Item("a", 2), Item("b")], dt.datetime(2026, 5, 1, tzinfo=dt.UTC), {"x"}
    )
    back = roundtrip(order, Order)
    assert back == order and isinstance(back.items[0], Item)


def test_a_dataclass_is_accepted_as_a_dict_with_defaults() -> None:
    assert roundtrip({"sku": "a"}, Item) == Item("a", 1)


def test_a_typeddict_round_trips() -> None:
    totals: Totals = {"net": Decimal("9.99"), "lines": 2}
    assert roundtrip(totals, Totals) == totals


def test_an_int_is_a_float_but_a_bool_is_not_an_int() -> None:
    assert roundtrip(3, float) == 3.0
    with pytest.raises(TaskArgumentError):
        encode(True, int, "t.n")


@pytest.mark.parametrize(
    ("value", "hint", "where", "words"),
    [
        ("3", int, "t.arg", "expected int"),
        ([1, "x"], list[int], "t.arg[1]", "expected int"),
        ({"a": "x"}, dict[str, int], "t.arg['a']", "expected int"),
        ("green", Literal["red", "blue"], "t.arg", "red"),
        ("green", Colour, "t.arg", "Colour"),
        ({"qty": 1}, Item, "t.arg.sku", "missing"),
        ({"sku": "a", "colour": 1}, Item, "t.arg.colour", "no such field"),
        ({"sku": 5}, Item, "t.arg.sku", "expected str"),
        ({"net": "1", "lines": "2"}, Totals, "t.arg.lines", "expected int"),
        ("not-a-date", dt.datetime, "t.arg", "datetime"),
        ("nope", uuid.UUID, "t.arg", "UUID"),
        ((1, 2), tuple[int], "t.arg", "1"),
    ],
)
def test_a_mismatch_names_the_path(value: Any, hint: Any, where: str, words: str) -> None:
    with pytest.raises(TaskArgumentError) as info:
        decode(value, hint, "t.arg")
    assert info.value.field == where
    assert words in str(info.value)


def test_mapping_keys_must_be_text() -> None:
    with pytest.raises(TaskArgumentError, match="keys must be str"):
        encode({1: 1}, dict[str, int], "t.arg")


def test_the_error_is_a_validation_error_and_unrecoverable() -> None:
    with pytest.raises(TaskArgumentError) as info:
        encode("x", int, "send.n")
    assert isinstance(info.value, ValidationError)
    assert isinstance(info.value, UnrecoverableError)  # a worker does not retry it


def test_pydantic_models_round_trip_when_installed() -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed")

    class User(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        age: int

    assert roundtrip(User(name="ada", age=36), User) == User(name="ada", age=36)
    assert roundtrip({"name": "ada", "age": 36}, User) == User(name="ada", age=36)
    with pytest.raises(TaskArgumentError) as info:
        decode({"name": "ada", "age": "old"}, User, "t.user")
    assert info.value.field.startswith("t.user")


def test_a_non_finite_float_is_refused() -> None:
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(TaskArgumentError, match="finite"):
            encode(bad, float, "t.x")


def test_var_positional_and_var_keyword_arguments_round_trip_by_their_hints() -> None:
    @glidemq.task("q")
    def collect(first: int, *more: int, label: str = "x", **extra: float) -> list[Any]:
        return [first, more, label, extra]

    data = collect.payload(1, 2, 3, label="y", ratio=0.5)
    assert orjson.loads(orjson.dumps(data)) == data
    args, kwargs = collect.arguments(orjson.loads(orjson.dumps(data)))
    assert collect(*args, **kwargs) == [1, (2, 3), "y", {"ratio": 0.5}]
    with pytest.raises(TaskArgumentError) as caught:
        collect.payload(1, 2, "three")
    assert caught.value.field == "collect.more[1]"


def test_task_options_accept_nested_mappings() -> None:
    @glidemq.task("q", backoff={"type": "exponential", "delay": 500})
    def work() -> None: ...

    assert work.options.backoff == Backoff("exponential", 500)
    kept = work.with_options(remove_on_complete={"count": 3}).options.remove_on_complete
    assert kept == KeepJobs(count=3)
    with pytest.raises(ValidationError, match="backoff"):
        glidemq.task("q", backoff={"typ": "fixed"})
