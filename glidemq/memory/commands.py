"""The data commands of an in-memory server (strings, hashes, lists, sets, sorted sets, keys):
the ones glidemq's library and clients send, with the server's replies and errors.

Each command takes the key space and its arguments as bytes and returns a reply: int,
bytes, None (nil), a list, or a Status; it raises CommandError for an error reply.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

from .data import CommandError, Keyspace, Status, ZSet, format_double

__all__ = ["COMMANDS", "Command", "glob_match", "parse_float", "parse_int"]

Command = Callable[[Keyspace, list[bytes]], Any]
OK = Status("OK")
_NOT_INT = "ERR value is not an integer or out of range"
_NOT_FLOAT = "ERR value is not a valid float"
_SYNTAX = "ERR syntax error"


def parse_int(raw: bytes) -> int:
    """An integer argument as the server reads it (decimal only)."""
    if not re.fullmatch(rb"-?\d+", raw):
        raise CommandError(_NOT_INT)
    return int(raw)


def parse_float(raw: bytes) -> float:
    low = raw.lower()
    if low in (b"+inf", b"inf"):
        return float("inf")
    if low == b"-inf":
        return float("-inf")
    try:
        value = float(raw)
    except ValueError:
        raise CommandError(_NOT_FLOAT) from None
    if value != value:
        raise CommandError(_NOT_FLOAT)
    return value


def _bound(raw: bytes) -> tuple[float, bool]:
    if raw.startswith(b"("):
        return parse_float(raw[1:]), True
    return parse_float(raw), False


def glob_match(pattern: bytes, name: bytes) -> bool:
    """Valkey's glob: * ? [set] [^set] and \\ escapes."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i : i + 1]
        if c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i : i + 1]))
        elif c == b"[":
            j = pattern.find(b"]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                negate = body.startswith(b"^")
                body = body[1:] if negate else body
                out.append(b"[" + (b"^" if negate else b"") + re.escape(body) + b"]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.fullmatch(b"".join(out), name, re.DOTALL) is not None


def _arity(args: list[bytes], low: int, even_after: int | None = None) -> None:
    if len(args) < low or (even_after is not None and (len(args) - even_after) % 2):
        raise CommandError("ERR wrong number of arguments")


# -- keys -------------------------------------------------------------------------------


def _del(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 1)
    return sum(1 for k in a if ks.get(k) is not None and ks.delete(k))


def _exists(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 1)
    return sum(1 for k in a if ks.get(k) is not None)


def _pexpire(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 2)
    if ks.get(a[0]) is None:
        return 0
    ms = parse_int(a[1])
    if ms <= 0:
        ks.delete(a[0])
    else:
        ks.expires[a[0]] = ks.now_ms() + ms
    return 1


def _pttl(ks: Keyspace, a: list[bytes]) -> int:
    if ks.get(a[0]) is None:
        return -2
    at = ks.expires.get(a[0])
    return -1 if at is None else max(0, at - ks.now_ms())


def _scan(ks: Keyspace, a: list[bytes]) -> list[Any]:
    # Every match in one reply (cursor 0): COUNT is only a hint on the server too.
    pattern = b"*"
    i = 1
    while i < len(a):
        opt = a[i].upper()
        if opt == b"MATCH":
            pattern = a[i + 1]
        elif opt not in (b"COUNT", b"TYPE"):
            raise CommandError(_SYNTAX)
        i += 2
    return [b"0", [k for k in sorted(ks.live_keys()) if glob_match(pattern, k)]]


def _type(ks: Keyspace, a: list[bytes]) -> Status:
    v = ks.get(a[0])
    names = {bytes: "string", dict: "hash", list: "list", set: "set", ZSet: "zset"}
    return Status("none" if v is None else names.get(type(v), "stream"))


# -- strings ----------------------------------------------------------------------------


def _get(ks: Keyspace, a: list[bytes]) -> bytes | None:
    return ks.typed(a[0], bytes)


def _set(ks: Keyspace, a: list[bytes]) -> Status | None:
    _arity(a, 2)
    opts = [o.upper() for o in a[2:]]
    if b"NX" in opts and ks.get(a[0]) is not None:
        return None
    ks.delete(a[0])
    ks.values[a[0]] = a[1]
    if b"PX" in opts:
        ks.expires[a[0]] = ks.now_ms() + parse_int(a[2 + opts.index(b"PX") + 1])
    return OK


def _incrby(ks: Keyspace, key: bytes, by: int) -> int:
    raw = ks.typed(key, bytes)
    value = (parse_int(raw) if raw is not None else 0) + by
    ks.values[key] = str(value).encode()
    return value


def _incr(ks: Keyspace, a: list[bytes]) -> int:
    return _incrby(ks, a[0], 1)


# -- hashes -----------------------------------------------------------------------------


def _hset(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 3, even_after=1)
    h = ks.make(a[0], dict, dict)
    new = 0
    for i in range(1, len(a), 2):
        new += a[i] not in h
        h[a[i]] = a[i + 1]
    return new


def _hsetnx(ks: Keyspace, a: list[bytes]) -> int:
    h = ks.make(a[0], dict, dict)
    if a[1] in h:
        return 0
    h[a[1]] = a[2]
    return 1


def _hget(ks: Keyspace, a: list[bytes]) -> bytes | None:
    if len(a) != 2:
        raise CommandError("ERR wrong number of arguments for 'hget' command")
    h = ks.typed(a[0], dict)
    return None if h is None else h.get(a[1])


def _hmget(ks: Keyspace, a: list[bytes]) -> list[bytes | None]:
    _arity(a, 2)
    h = ks.typed(a[0], dict) or {}
    return [h.get(f) for f in a[1:]]


def _hgetall(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    h = ks.typed(a[0], dict) or {}
    return [x for pair in h.items() for x in pair]


def _hdel(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 2)
    h = ks.typed(a[0], dict)
    if h is None:
        return 0
    n = sum(1 for f in a[1:] if h.pop(f, None) is not None)
    ks.drop_if_empty(a[0])
    return n


def _hincrby(ks: Keyspace, a: list[bytes]) -> int:
    h = ks.make(a[0], dict, dict)
    old = h.get(a[1])
    try:
        value = (parse_int(old) if old is not None else 0) + parse_int(a[2])
    except CommandError:
        raise CommandError("ERR hash value is not an integer") from None
    h[a[1]] = str(value).encode()
    return value


def _hincrbyfloat(ks: Keyspace, a: list[bytes]) -> bytes:
    h = ks.make(a[0], dict, dict)
    old = h.get(a[1])
    value = (parse_float(old) if old is not None else 0.0) + parse_float(a[2])
    text = format_double(value)
    h[a[1]] = text
    return text


def _hlen(ks: Keyspace, a: list[bytes]) -> int:
    return len(ks.typed(a[0], dict) or {})


def _hkeys(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    return list(ks.typed(a[0], dict) or {})


def _hexists(ks: Keyspace, a: list[bytes]) -> int:
    return int(a[1] in (ks.typed(a[0], dict) or {}))


# -- lists ------------------------------------------------------------------------------


def _rpush(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 2)
    lst = ks.make(a[0], list, list)
    lst.extend(a[1:])
    return len(lst)


def _lpush(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 2)
    lst = ks.make(a[0], list, list)
    for v in a[1:]:
        lst.insert(0, v)
    return len(lst)


def _rpop(ks: Keyspace, a: list[bytes]) -> Any:
    lst = ks.typed(a[0], list)
    if not lst:
        return None
    if len(a) == 1:
        value = lst.pop()
        ks.drop_if_empty(a[0])
        return value
    n = parse_int(a[1])
    out = [lst.pop() for _ in range(min(n, len(lst)))]
    ks.drop_if_empty(a[0])
    return out


def _llen(ks: Keyspace, a: list[bytes]) -> int:
    return len(ks.typed(a[0], list) or [])


def _lrange(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    lst = ks.typed(a[0], list) or []
    start, stop, n = parse_int(a[1]), parse_int(a[2]), len(lst)
    start = max(0, n + start) if start < 0 else start
    stop = n + stop if stop < 0 else stop
    return lst[start : stop + 1] if start <= stop else []


def _lrem(ks: Keyspace, a: list[bytes]) -> int:
    lst = ks.typed(a[0], list)
    if not lst:
        return 0
    count, value = parse_int(a[1]), a[2]
    positions = [i for i, v in enumerate(lst) if v == value]
    if count < 0:
        positions = positions[::-1][:-count]
    elif count > 0:
        positions = positions[:count]
    for i in sorted(positions, reverse=True):
        del lst[i]
    ks.drop_if_empty(a[0])
    return len(positions)


# -- sets -------------------------------------------------------------------------------


def _sadd(ks: Keyspace, a: list[bytes]) -> int:
    _arity(a, 2)
    s = ks.make(a[0], set, set)
    before = len(s)
    s.update(a[1:])
    return len(s) - before


def _srem(ks: Keyspace, a: list[bytes]) -> int:
    s = ks.typed(a[0], set)
    if s is None:
        return 0
    n = len(s.intersection(a[1:]))
    s.difference_update(a[1:])
    ks.drop_if_empty(a[0])
    return n


def _smembers(ks: Keyspace, a: list[bytes]) -> set[bytes]:
    return set(ks.typed(a[0], set) or ())


def _sismember(ks: Keyspace, a: list[bytes]) -> int:
    return int(a[1] in (ks.typed(a[0], set) or ()))


def _scard(ks: Keyspace, a: list[bytes]) -> int:
    return len(ks.typed(a[0], set) or ())


def _sscan(ks: Keyspace, a: list[bytes]) -> list[Any]:
    # Every member in one reply (cursor 0), as _scan does for keys.
    return [b"0", sorted(ks.typed(a[0], set) or ())]


def _srandmember(ks: Keyspace, a: list[bytes]) -> Any:
    members = sorted(ks.typed(a[0], set) or ())
    if len(a) == 1:
        return random.choice(members) if members else None
    n = parse_int(a[1])
    if n < 0:
        return [random.choice(members) for _ in range(-n)] if members else []
    return random.sample(members, min(n, len(members)))


# -- sorted sets ------------------------------------------------------------------------


def _zadd(ks: Keyspace, a: list[bytes]) -> int:
    i = 1
    flags = set()
    while i < len(a) and a[i].upper() in (b"NX", b"XX", b"GT", b"LT", b"CH"):
        flags.add(a[i].upper())
        i += 1
    _arity(a[i:], 2, even_after=0)
    pairs = [(parse_float(a[j]), a[j + 1]) for j in range(i, len(a), 2)]
    z = ks.make(a[0], ZSet, ZSet)
    changed = 0
    for score, member in pairs:
        old = z.scores.get(member)
        if (b"NX" in flags and old is not None) or (b"XX" in flags and old is None):
            continue
        if old is not None and (
            (b"GT" in flags and score <= old) or (b"LT" in flags and score >= old)
        ):
            continue
        new = z.add(member, score)
        changed += new or (b"CH" in flags and old != score)
    ks.drop_if_empty(a[0])
    return changed


def _zrem(ks: Keyspace, a: list[bytes]) -> int:
    z = ks.typed(a[0], ZSet)
    if z is None:
        return 0
    n = sum(1 for m in a[1:] if z.remove(m))
    ks.drop_if_empty(a[0])
    return n


def _zcard(ks: Keyspace, a: list[bytes]) -> int:
    z = ks.typed(a[0], ZSet)
    return 0 if z is None else len(z)


def _zscore(ks: Keyspace, a: list[bytes]) -> bytes | None:
    z = ks.typed(a[0], ZSet)
    score = None if z is None else z.scores.get(a[1])
    return None if score is None else format_double(score)


def _flat(entries: list[tuple[float, bytes]], withscores: bool) -> list[bytes]:
    if not withscores:
        return [m for _, m in entries]
    return [x for s, m in entries for x in (m, format_double(s))]


def _limit(entries: list[Any], opts: list[bytes]) -> list[Any]:
    upper = [o.upper() for o in opts]
    if b"LIMIT" in upper:
        i = upper.index(b"LIMIT")
        offset, count = parse_int(opts[i + 1]), parse_int(opts[i + 2])
        entries = entries[offset:] if count < 0 else entries[offset : offset + count]
    return entries


def _zrange(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    opts = [o.upper() for o in a[3:]]
    if b"BYSCORE" in opts:
        rev = b"REV" in opts
        lo, hi = (a[2], a[1]) if rev else (a[1], a[2])
        return _by_score(ks, [a[0], lo, hi, *a[3:]], rev)
    z = ks.typed(a[0], ZSet)
    if z is None:
        return []
    start, stop = parse_int(a[1]), parse_int(a[2])
    if b"REV" in opts:  # ranks counted from the highest score
        n = len(z)
        first = max(0, start + n if start < 0 else start)
        last = min(n - 1, stop + n if stop < 0 else stop)
        picked = z.order[n - 1 - last : n - first][::-1] if first <= last else []
        return _flat(picked, b"WITHSCORES" in opts)
    return _flat(z.rank_range(start, stop), b"WITHSCORES" in opts)


def _zrevrange(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    return _zrange(ks, [*a[:3], b"REV", *a[3:]])


def _by_score(ks: Keyspace, a: list[bytes], rev: bool) -> list[bytes]:
    z = ks.typed(a[0], ZSet)
    if z is None:
        return []
    (lo, lo_open), (hi, hi_open) = _bound(a[1]), _bound(a[2])
    entries = z.score_range(lo, lo_open, hi, hi_open)
    if rev:
        entries.reverse()
    opts = a[3:]
    return _flat(_limit(entries, opts), b"WITHSCORES" in [o.upper() for o in opts])


def _zrangebyscore(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    return _by_score(ks, a, rev=False)


def _zrevrangebyscore(ks: Keyspace, a: list[bytes]) -> list[bytes]:
    return _by_score(ks, [a[0], a[2], a[1], *a[3:]], rev=True)


def _zcount(ks: Keyspace, a: list[bytes]) -> int:
    z = ks.typed(a[0], ZSet)
    if z is None:
        return 0
    (lo, lo_open), (hi, hi_open) = _bound(a[1]), _bound(a[2])
    return len(z.score_range(lo, lo_open, hi, hi_open))


def _zremrangebyscore(ks: Keyspace, a: list[bytes]) -> int:
    z = ks.typed(a[0], ZSet)
    if z is None:
        return 0
    (lo, lo_open), (hi, hi_open) = _bound(a[1]), _bound(a[2])
    gone = z.score_range(lo, lo_open, hi, hi_open)
    for _, m in gone:
        z.remove(m)
    ks.drop_if_empty(a[0])
    return len(gone)


def _zremrangebyrank(ks: Keyspace, a: list[bytes]) -> int:
    z = ks.typed(a[0], ZSet)
    if z is None:
        return 0
    gone = z.rank_range(parse_int(a[1]), parse_int(a[2]))
    for _, m in list(gone):
        z.remove(m)
    ks.drop_if_empty(a[0])
    return len(gone)


def _zrank(ks: Keyspace, a: list[bytes]) -> int | None:
    z = ks.typed(a[0], ZSet)
    if z is None or a[1] not in z.scores:
        return None
    return z.order.index((z.scores[a[1]], a[1]))


COMMANDS: dict[bytes, Command] = {
    b"DEL": _del,
    b"UNLINK": _del,
    b"EXISTS": _exists,
    b"PEXPIRE": _pexpire,
    b"PTTL": _pttl,
    b"SCAN": _scan,
    b"TYPE": _type,
    b"GET": _get,
    b"SET": _set,
    b"INCR": _incr,
    b"HSET": _hset,
    b"HSETNX": _hsetnx,
    b"HGET": _hget,
    b"HMGET": _hmget,
    b"HGETALL": _hgetall,
    b"HDEL": _hdel,
    b"HINCRBY": _hincrby,
    b"HINCRBYFLOAT": _hincrbyfloat,
    b"HLEN": _hlen,
    b"HKEYS": _hkeys,
    b"HEXISTS": _hexists,
    b"RPUSH": _rpush,
    b"LPUSH": _lpush,
    b"RPOP": _rpop,
    b"LLEN": _llen,
    b"LRANGE": _lrange,
    b"LREM": _lrem,
    b"SADD": _sadd,
    b"SREM": _srem,
    b"SMEMBERS": _smembers,
    b"SISMEMBER": _sismember,
    b"SCARD": _scard,
    b"SSCAN": _sscan,
    b"SRANDMEMBER": _srandmember,
    b"ZADD": _zadd,
    b"ZREM": _zrem,
    b"ZCARD": _zcard,
    b"ZSCORE": _zscore,
    b"ZRANGE": _zrange,
    b"ZREVRANGE": _zrevrange,
    b"ZRANGEBYSCORE": _zrangebyscore,
    b"ZREVRANGEBYSCORE": _zrevrangebyscore,
    b"ZCOUNT": _zcount,
    b"ZREMRANGEBYSCORE": _zremrangebyscore,
    b"ZREMRANGEBYRANK": _zremrangebyrank,
    b"ZRANK": _zrank,
}
"""Every data command outside streams, by name."""
