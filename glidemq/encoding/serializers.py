"""Serializers of job data and results, chosen per queue.

JSON (orjson) is the default and the wire format every language reads; its values are stored
as they are. Any other serializer tags what it writes with `<name>:` (as compression tags
with `gz:`; no JSON text starts with a name and a colon), so every glidemq reader decodes a
value whatever serializer wrote it. `msgpack` is built in (the `glidemq[msgpack]` extra);
`register_serializer` adds others. A queue records its serializer in its meta hash; a Queue
or Worker with a different one is refused with SerializerMismatchError.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError

__all__ = [
    "DEFAULT_SERIALIZER",
    "SERIALIZER_FIELD",
    "Serializer",
    "get_serializer",
    "register_serializer",
    "untag",
]

DEFAULT_SERIALIZER = "json"
SERIALIZER_FIELD = "serializer"
"""Field of the queue's meta hash naming its serializer; absent means json."""
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
_RESERVED = frozenset({"json", "gz"})


@dataclass(frozen=True, slots=True)
class Serializer:
    """A named pair of functions: `dumps(value) -> bytes` and `loads(bytes) -> value`.
    `dumps` raises TypeError for a value it cannot encode."""

    name: str
    dumps: Callable[[Any], bytes]
    loads: Callable[[bytes], Any]

    @property
    def tag(self) -> bytes:
        """The prefix of every value it writes."""
        return self.name.encode() + b":"


_REGISTRY: dict[str, Serializer] = {}


def register_serializer(serializer: Serializer) -> None:
    """Make a serializer usable by name (Queue / Worker `serializer=`) and readable by every
    reader of this process. Names are lowercase letters, digits and `_` (at most 16,
    starting with a letter); `json` and `gz` are taken."""
    if not isinstance(serializer, Serializer):
        raise ValidationError("serializer", "must be a Serializer(name, dumps, loads)")
    if not _NAME.match(serializer.name) or serializer.name in _RESERVED:
        raise ValidationError("serializer.name", f"{serializer.name!r} is not a usable name")
    _REGISTRY[serializer.name] = serializer


def _msgpack() -> Serializer:
    try:
        import msgpack  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ValidationError(
            "serializer", "msgpack needs the msgpack package: pip install 'glidemq[msgpack]'"
        ) from None

    def dumps(value: Any) -> bytes:
        try:
            out: bytes = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"not msgpack-serializable: {exc}") from None
        return out

    def loads(raw: bytes) -> Any:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)

    return Serializer("msgpack", dumps, loads)


def get_serializer(name: object) -> Serializer | None:
    """The serializer called `name`; None for JSON (the default, stored untagged)."""
    if name is None or name == DEFAULT_SERIALIZER:
        return None
    if not isinstance(name, str):
        raise ValidationError("serializer", f"must be a serializer name, got {name!r}")
    found = _REGISTRY.get(name)
    if found is None and name == "msgpack":
        found = _REGISTRY["msgpack"] = _msgpack()
    if found is None:
        known = ", ".join(sorted({DEFAULT_SERIALIZER, "msgpack", *_REGISTRY}))
        raise ValidationError("serializer", f"unknown serializer {name!r} (known: {known})")
    return found


def untag(raw: bytes) -> tuple[Serializer, bytes] | None:
    """The serializer a stored value was written with and its payload; None for JSON."""
    if not raw[:1].isalpha():
        return None  # JSON objects, arrays, strings and numbers: the common case
    i = raw.find(b":", 1, 17)
    if i < 0:
        return None  # true / false / null
    name = raw[:i].decode(errors="replace")
    try:
        found = get_serializer(name)
    except ValidationError:
        return None
    return None if found is None else (found, raw[i + 1 :])
