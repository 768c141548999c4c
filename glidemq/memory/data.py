"""The values an in-memory server holds, and the key space that holds them.

Keys and members are bytes, as on a Valkey server. A key's type is the Python type of its
value: bytes (string), dict (hash), list, set, ZSet or Stream. Expiry times are on the
server's clock (ms), checked when a key is touched.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "WRONGTYPE",
    "CommandError",
    "ConsumerGroup",
    "Keyspace",
    "Pending",
    "Status",
    "Stream",
    "StreamId",
    "ZSet",
    "format_double",
]

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"

T = TypeVar("T")


class CommandError(Exception):
    """A command's error reply: the text starts with its code, as the server sends it
    ("WRONGTYPE ...", "NOGROUP ...", "ERR ...")."""


class Status(str):
    """A simple-string reply ("OK", "QUEUED"), apart from bulk strings."""


def format_double(value: float) -> bytes:
    """A score as the server writes it: the shortest text that reads back exactly."""
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    if value == int(value) and abs(value) < 1e17:
        return str(int(value)).encode()
    return repr(value).encode()


class ZSet:
    """A sorted set: members by (score, member), as ZRANGE orders them."""

    __slots__ = ("order", "scores")

    def __init__(self) -> None:
        self.scores: dict[bytes, float] = {}
        self.order: list[tuple[float, bytes]] = []

    def __len__(self) -> int:
        return len(self.scores)

    def add(self, member: bytes, score: float) -> bool:
        """Set `member`'s score; True when it is new."""
        old = self.scores.get(member)
        if old is not None:
            if old == score:
                return False
            del self.order[bisect.bisect_left(self.order, (old, member))]
        self.scores[member] = score
        bisect.insort(self.order, (score, member))
        return old is None

    def remove(self, member: bytes) -> bool:
        old = self.scores.pop(member, None)
        if old is None:
            return False
        del self.order[bisect.bisect_left(self.order, (old, member))]
        return True

    def rank_range(self, start: int, stop: int) -> list[tuple[float, bytes]]:
        """Entries by rank, both ends inclusive, negative ranks from the end."""
        n = len(self.order)
        if start < 0:
            start = max(0, n + start)
        if stop < 0:
            stop = n + stop
        if start > stop or start >= n:
            return []
        return self.order[start : min(stop, n - 1) + 1]

    def score_range(
        self, lo: float, lo_open: bool, hi: float, hi_open: bool
    ) -> list[tuple[float, bytes]]:
        """Entries with a score between lo and hi (each end inclusive unless open)."""
        i = bisect.bisect_left(self.order, (lo, b""))
        out = []
        for score, member in self.order[i:]:
            if score > hi or (hi_open and score == hi):
                break
            if lo_open and score == lo:
                continue
            out.append((score, member))
        return out


StreamId = tuple[int, int]


@dataclass
class Pending:
    """One delivered, unacknowledged entry of a group."""

    consumer: bytes
    delivered_at: float  # monotonic ms (Keyspace.mono_ms): idle time, as the server measures it
    deliveries: int


@dataclass
class ConsumerGroup:
    last_id: StreamId
    pending: dict[StreamId, Pending] = field(default_factory=dict)  # ordered by id
    consumers: dict[bytes, float] = field(default_factory=dict)  # name -> last seen (mono_ms)
    entries_read: int = 0

    def sorted_pending(self) -> list[tuple[StreamId, Pending]]:
        return sorted(self.pending.items())


@dataclass
class Stream:
    """Entries by id (kept in id order) and the consumer groups reading them."""

    entries: dict[StreamId, list[bytes]] = field(default_factory=dict)
    ids: list[StreamId] = field(default_factory=list)
    last_id: StreamId = (0, 0)
    groups: dict[bytes, ConsumerGroup] = field(default_factory=dict)
    added: int = 0

    def append(self, entry_id: StreamId, fields: list[bytes]) -> None:
        self.entries[entry_id] = fields
        self.ids.append(entry_id)
        self.last_id = entry_id
        self.added += 1

    def delete(self, entry_id: StreamId) -> bool:
        if self.entries.pop(entry_id, None) is None:
            return False
        del self.ids[bisect.bisect_left(self.ids, entry_id)]
        return True

    def between(self, lo: StreamId, hi: StreamId) -> Iterator[StreamId]:
        i = bisect.bisect_left(self.ids, lo)
        for entry_id in self.ids[i:]:
            if entry_id > hi:
                return
            yield entry_id

    def after(self, last: StreamId) -> Iterator[StreamId]:
        i = bisect.bisect_right(self.ids, last)
        yield from self.ids[i:]


class Keyspace:
    """One database: values by key, with expiry on `now_ms` (the server's clock); `mono_ms`
    is the monotonic time (ms) that idle times of pending stream entries are measured on."""

    def __init__(self, now_ms: Callable[[], int], mono_ms: Callable[[], float]) -> None:
        self.now_ms = now_ms
        self.mono_ms = mono_ms
        self.values: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}

    def get(self, key: bytes) -> Any:
        """The value at `key`, or None (an expired key is removed first)."""
        at = self.expires.get(key)
        if at is not None and at <= self.now_ms():
            self.delete(key)
            return None
        return self.values.get(key)

    def typed(self, key: bytes, kind: type[T]) -> T | None:
        """The value at `key` if it has type `kind`; None when absent; WRONGTYPE otherwise."""
        value = self.get(key)
        if value is not None and not isinstance(value, kind):
            raise CommandError(WRONGTYPE)
        return value

    def make(self, key: bytes, kind: Callable[[], T], check: type[T]) -> T:
        """The value at `key`, created empty when absent; WRONGTYPE for another type."""
        value = self.typed(key, check)
        if value is None:
            value = self.values[key] = kind()
        return value

    def delete(self, key: bytes) -> bool:
        self.expires.pop(key, None)
        return self.values.pop(key, None) is not None

    def drop_if_empty(self, key: bytes) -> None:
        """Containers that become empty disappear, as on the server (streams stay)."""
        value = self.values.get(key)
        if value is not None and not isinstance(value, bytes | Stream) and len(value) == 0:
            self.delete(key)

    def live_keys(self) -> list[bytes]:
        return [k for k in list(self.values) if self.get(k) is not None]

    def flush(self) -> None:
        self.values.clear()
        self.expires.clear()
