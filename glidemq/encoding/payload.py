"""A task's arguments as job data: each value checked against its type hint and turned into
JSON (`encode`, on add) and back into what the hint names (`decode`, before the run).

Understood hints: `Any` (and no hint), None, bool, int, float (an int is accepted), str,
list / set / frozenset / tuple / Sequence, dict / Mapping with str keys, unions (`X | None`),
Literal, Enum, datetime / date / time (ISO text), UUID and Decimal (text), dataclasses,
TypedDicts and pydantic models (anything with `model_validate` and `model_dump`). Another
class is checked with isinstance and passed as it is. A mismatch is a `TaskArgumentError`
whose field names the argument and the path inside it (`send.to`, `order.items[2].sku`).
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import datetime as dt
import enum
import math
import types
import typing
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import TaskArgumentError

__all__ = ["decode", "encode", "encode_argument", "type_name"]

_MISSING = object()
_SEQUENCES = (
    list, set, frozenset, cabc.Sequence, cabc.MutableSequence, cabc.Set, cabc.MutableSet,
    cabc.Iterable, cabc.Collection,
)  # fmt: skip


def type_name(hint: Any) -> str:
    """How a hint reads in an error message: `int`, `list[str]`, `Order`."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _fail(where: str, hint: Any, value: Any) -> TaskArgumentError:
    got = "None" if value is None else type(value).__name__
    return TaskArgumentError(where, f"expected {type_name(hint)}, got {got} {_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _not_literal(where: str, hint: Any, value: Any) -> TaskArgumentError:
    choices = list(typing.get_args(hint))
    return TaskArgumentError(where, f"expected one of {choices!r}, got {_short(value)}")


def _is_model(hint: Any) -> bool:
    return (
        isinstance(hint, type) and hasattr(hint, "model_validate") and hasattr(hint, "model_dump")
    )


def _hints(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an unresolvable forward reference: check nothing rather than fail
        return {}


# -- encode: Python value -> JSON-ready value ---------------------------------------------------


_UNTYPED = (Any, object, tuple[Any, ...], dict[str, Any])  # no hint, and *args / **kwargs of none


def encode_argument(value: Any, hint: Any, where: str) -> Any:
    """`encode` for a task argument. One without a type hint (or hinted `Any`) must be JSON
    already: a datetime, UUID, set, dataclass, ... there would arrive as something else (or
    not at all), so it is refused, naming the argument, with the hint that would carry it."""
    if hint in _UNTYPED:
        _check_json(value, where)
        return value
    return encode(value, hint, where)


def _check_json(value: Any, where: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):  # JSON has no NaN or infinity: it would become null
            raise TaskArgumentError(where, f"expected a finite float, got {value!r}")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TaskArgumentError(where, f"keys must be str, got {type(key).__name__}")
            _check_json(item, f"{where}[{key!r}]")
        return
    kind = type(value).__name__
    name = where.partition(".")[2]
    if "[" not in where and _hint_carries(type(value)):
        fix = f"give the parameter the type hint (`{name}: {kind}`) to send one"
    elif _hint_carries(type(value)):
        fix = f"give the parameter {name.partition('[')[0]!r} a type hint naming {kind}"
    else:
        fix = "pass JSON, or a value of a type a hint can name (docs/TASKS.md)"
    raise TaskArgumentError(
        where,
        f"a value of type {kind} is not JSON (str, int, float, bool, None, list, dict), and "
        f"an argument without a type hint is sent as JSON: {fix}",
    )


def _hint_carries(cls: type) -> bool:
    """Whether a type hint naming `cls` makes a value of it a task argument."""
    return (
        cls in (dt.datetime, dt.date, dt.time, uuid.UUID, Decimal, set, frozenset)
        or issubclass(cls, enum.Enum)
        or dataclasses.is_dataclass(cls)
        or _is_model(cls)
    )


def encode(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against `hint`, as JSON-ready data (dicts, lists, str, numbers, ...)."""
    if hint is Any or hint is object or hint is _MISSING:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _encode_union(value, hint, where)
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise _not_literal(where, hint, value)
    if origin is not None:
        return _encode_generic(value, hint, origin, where)
    return _encode_class(value, hint, where)


def _union(convert: Any, value: Any, hint: Any, where: str) -> Any:
    deeper: list[TaskArgumentError] = []
    for option in typing.get_args(hint):
        try:
            return convert(value, option, where)
        except TaskArgumentError as exc:
            if exc.field != where:  # the value had the option's shape; something inside failed
                deeper.append(exc)
    if len(deeper) == 1:
        raise deeper[0]
    raise _fail(where, hint, value)


def _encode_union(value: Any, hint: Any, where: str) -> Any:
    return _union(encode, value, hint, where)


def _encode_generic(value: Any, hint: Any, origin: Any, where: str) -> Any:
    args = typing.get_args(hint)
    if origin in (dict, cabc.Mapping, cabc.MutableMapping):
        if not isinstance(value, cabc.Mapping):
            raise _fail(where, hint, value)
        value_hint = args[1] if len(args) == 2 else Any
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TaskArgumentError(where, f"keys must be str, got {type(key).__name__}")
            out[key] = encode(item, value_hint, f"{where}[{key!r}]")
        return out
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _fail(where, hint, value)
        if len(args) == 2 and args[1] is Ellipsis:
            return [encode(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
        if len(args) != len(value):
            raise TaskArgumentError(where, f"expected {len(args)} items, got {len(value)}")
        pairs = enumerate(zip(value, args, strict=True))
        return [encode(v, h, f"{where}[{i}]") for i, (v, h) in pairs]
    if origin in _SEQUENCES:
        if isinstance(value, str | bytes | cabc.Mapping) or not isinstance(
            value, list | tuple | set | frozenset
        ):
            raise _fail(where, hint, value)
        item_hint = args[0] if args else Any
        return [encode(v, item_hint, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(origin, type):
        return _encode_class(value, origin, where)
    return value


def _encode_class(value: Any, hint: Any, where: str) -> Any:  # noqa: C901 - one case per kind
    if hint is None or hint is type(None):
        if value is None:
            return None
        raise _fail(where, None, value)
    if not isinstance(hint, type):
        return value  # a TypeVar, a NewType, ...: nothing to check
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _fail(where, hint, value)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _fail(where, hint, value)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):  # JSON has no NaN or infinity: it would become null
                raise TaskArgumentError(where, f"expected a finite float, got {value!r}")
            return value
        raise _fail(where, hint, value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise _fail(where, hint, value)
    if issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value.value
        try:
            return hint(value).value
        except ValueError:
            raise _fail(where, hint, value) from None
    if hint in (dt.datetime, dt.date, dt.time):
        if isinstance(value, hint) and not (hint is dt.date and isinstance(value, dt.datetime)):
            return value.isoformat()
        raise _fail(where, hint, value)
    if hint in (uuid.UUID, Decimal):
        if isinstance(value, hint):
            return str(value)
        raise _fail(where, hint, value)
    if typing.is_typeddict(hint):
        return _encode_typeddict(value, hint, where)
    if dataclasses.is_dataclass(hint):
        return _encode_dataclass(value, hint, where)
    if _is_model(hint):
        return _encode_model(value, hint, where)
    if hint in (list, tuple, set, frozenset, dict):
        return _encode_generic(value, hint, hint, where)
    if isinstance(value, hint):
        return value
    raise _fail(where, hint, value)


def _encode_dataclass(value: Any, hint: type, where: str) -> dict[str, Any]:
    if isinstance(value, cabc.Mapping):
        value = _decode_dataclass(value, hint, where)  # a dict of its fields is accepted
    elif not isinstance(value, hint):
        raise _fail(where, hint, value)
    hints = _hints(hint)
    return {
        f.name: encode(getattr(value, f.name), hints.get(f.name, Any), f"{where}.{f.name}")
        for f in dataclasses.fields(hint)
    }


def _encode_typeddict(value: Any, hint: type, where: str) -> dict[str, Any]:
    checked = _check_typeddict(value, hint, where)
    hints = _hints(hint)
    return {k: encode(v, hints.get(k, Any), f"{where}.{k}") for k, v in checked.items()}


def _encode_model(value: Any, hint: type, where: str) -> Any:
    if not isinstance(value, hint):
        value = _decode_model(value, hint, where)
    return value.model_dump(mode="json")


# -- decode: JSON data -> what the hint names ---------------------------------------------------


def decode(value: Any, hint: Any, where: str) -> Any:
    """Job data (as `encode` made it, or added by hand) as the Python value `hint` names."""
    if hint is Any or hint is object or hint is _MISSING:
        return value
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _union(decode, value, hint, where)
    if origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
        raise _not_literal(where, hint, value)
    if origin is not None:
        return _decode_generic(value, hint, origin, where)
    return _decode_class(value, hint, where)


def _decode_generic(value: Any, hint: Any, origin: Any, where: str) -> Any:
    args = typing.get_args(hint)
    if origin in (dict, cabc.Mapping, cabc.MutableMapping):
        if not isinstance(value, dict):
            raise _fail(where, hint, value)
        value_hint = args[1] if len(args) == 2 else Any
        return {k: decode(v, value_hint, f"{where}[{k!r}]") for k, v in value.items()}
    if not isinstance(value, list | tuple):
        raise _fail(where, hint, value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise TaskArgumentError(where, f"expected {len(args)} items, got {len(value)}")
        if not args:
            return tuple(value)
        pairs = enumerate(zip(value, args, strict=True))
        return tuple(decode(v, h, f"{where}[{i}]") for i, (v, h) in pairs)
    item_hint = args[0] if args else Any
    items = [decode(v, item_hint, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is set or origin is cabc.Set or origin is cabc.MutableSet:
        return set(items)
    if origin is frozenset:
        return frozenset(items)
    return items


def _decode_class(value: Any, hint: Any, where: str) -> Any:  # noqa: C901 - one case per kind
    if hint is None or hint is type(None):
        if value is None:
            return None
        raise _fail(where, None, value)
    if not isinstance(hint, type):
        return value
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _fail(where, hint, value)
    if hint in (bool, int, str):
        return _encode_class(value, hint, where)  # the same check; JSON keeps these as they are
    if issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        try:
            return hint(value)
        except ValueError:
            raise _fail(where, hint, value) from None
    if hint in (dt.datetime, dt.date, dt.time, uuid.UUID, Decimal):
        return _decode_text_value(value, hint, where)
    if typing.is_typeddict(hint):
        hints = _hints(hint)
        checked = _check_typeddict(value, hint, where)
        return {k: decode(v, hints.get(k, Any), f"{where}.{k}") for k, v in checked.items()}
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        return _decode_dataclass(value, hint, where)
    if _is_model(hint):
        return _decode_model(value, hint, where)
    if hint in (list, tuple, set, frozenset, dict):
        return _decode_generic(value, hint, hint, where)
    if isinstance(value, hint):
        return value
    raise _fail(where, hint, value)


def _decode_text_value(value: Any, hint: type, where: str) -> Any:
    if isinstance(value, hint) and not (hint is dt.date and isinstance(value, dt.datetime)):
        return value
    if not isinstance(value, str):
        raise _fail(where, hint, value)
    try:
        if hint is uuid.UUID:
            return uuid.UUID(value)
        if hint is Decimal:
            return Decimal(value)
        return hint.fromisoformat(value)  # type: ignore[attr-defined]
    except (ValueError, InvalidOperation):
        raise TaskArgumentError(
            where, f"expected {hint.__name__} text, got {_short(value)}"
        ) from None


def _decode_dataclass(value: Any, hint: type, where: str) -> Any:
    if not isinstance(value, cabc.Mapping):
        raise _fail(where, hint, value)
    fields = {f.name: f for f in dataclasses.fields(hint) if f.init}
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise TaskArgumentError(f"{where}.{unknown[0]}", f"{hint.__name__} has no such field")
    hints = _hints(hint)
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = decode(value[name], hints.get(name, Any), f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TaskArgumentError(f"{where}.{name}", "missing")
    return hint(**kwargs)


def _check_typeddict(value: Any, hint: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, cabc.Mapping):
        raise _fail(where, hint, value)
    allowed = hint.__required_keys__ | hint.__optional_keys__
    for key in value:
        if key not in allowed:
            raise TaskArgumentError(f"{where}.{key}", f"{hint.__name__} has no such key")
    for key in hint.__required_keys__:
        if key not in value:
            raise TaskArgumentError(f"{where}.{key}", "missing")
    return dict(value)


def _decode_model(value: Any, hint: Any, where: str) -> Any:
    if isinstance(value, hint):
        return value
    try:
        return hint.model_validate(value)
    except Exception as exc:  # pydantic's ValidationError, without importing pydantic
        errors = getattr(exc, "errors", None)
        if callable(errors):
            first = errors()[0]
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
            raise TaskArgumentError(f"{where}{path}", str(first["msg"])) from None
        raise TaskArgumentError(where, str(exc)) from None
