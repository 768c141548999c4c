"""The stream commands of an in-memory server: entries, consumer groups and their pending
lists, with the server's reply shapes.

Entry ids take their milliseconds from the server's clock; a pending entry's idle time is on
the clock's monotonic time (`Clock.monotonic_ms`: real time, as a lock is about processes that
are alive now, or a simulator's virtual time). Reads never block
here: the client waits for `Stream.added` to move and asks again (glidemq.memory.client).
"""

from __future__ import annotations

import re
from typing import Any

from .commands import Command, parse_int
from .data import CommandError, ConsumerGroup, Keyspace, Pending, Status, Stream, StreamId

__all__ = ["STREAM_COMMANDS", "format_id", "parse_id"]

_MAX_SEQ = 2**64 - 1
_BAD_ID = "ERR Invalid stream ID specified as stream command argument"
_OK = Status("OK")


def format_id(entry_id: StreamId) -> bytes:
    return f"{entry_id[0]}-{entry_id[1]}".encode()


def parse_id(raw: bytes, *, end: bool = False) -> StreamId:
    """'ms-seq' or 'ms' (seq 0 at a range's start, the largest at its end); '-' and '+'."""
    if raw == b"-":
        return (0, 0)
    if raw == b"+":
        return (2**64 - 1, _MAX_SEQ)
    m = re.fullmatch(rb"(\d+)(?:-(\d+))?", raw)
    if m is None:
        raise CommandError(_BAD_ID)
    seq = m.group(2)
    return (int(m.group(1)), int(seq) if seq is not None else (_MAX_SEQ if end else 0))


def _range_id(raw: bytes, *, end: bool) -> StreamId:
    if raw.startswith(b"("):
        ms, seq = parse_id(raw[1:], end=end)
        if end:
            return (ms, seq - 1) if seq > 0 else (ms - 1, _MAX_SEQ)
        return (ms, seq + 1) if seq < _MAX_SEQ else (ms + 1, 0)
    return parse_id(raw, end=end)


def _entry(stream: Stream, entry_id: StreamId) -> list[Any]:
    return [format_id(entry_id), list(stream.entries[entry_id])]


def _nogroup(key: bytes, group: bytes) -> CommandError:
    return CommandError(
        f"NOGROUP No such key '{key.decode(errors='replace')}' or consumer group "
        f"'{group.decode(errors='replace')}'"
    )


def _group(ks: Keyspace, key: bytes, name: bytes) -> tuple[Stream, ConsumerGroup]:
    stream = ks.typed(key, Stream)
    group = None if stream is None else stream.groups.get(name)
    if stream is None or group is None:
        raise _nogroup(key, name)
    return stream, group


# -- entries ----------------------------------------------------------------------------


def _trim(stream: Stream, opts: list[bytes], i: int) -> tuple[int, int]:
    """Apply MAXLEN/MINID at opts[i]; returns (entries removed, next index)."""
    kind = opts[i].upper()
    i += 1
    if opts[i] in (b"~", b"="):
        i += 1
    threshold = opts[i]
    i += 1
    if i < len(opts) and opts[i].upper() == b"LIMIT":
        i += 2
    removed = 0
    if kind == b"MAXLEN":
        keep = parse_int(threshold)
        while len(stream.ids) > keep:
            stream.delete(stream.ids[0])
            removed += 1
    else:
        floor = parse_id(threshold)
        while stream.ids and stream.ids[0] < floor:
            stream.delete(stream.ids[0])
            removed += 1
    return removed, i


def _next_id(ks: Keyspace, stream: Stream, raw: bytes) -> StreamId:
    last = stream.last_id
    if raw == b"*":
        ms = max(ks.now_ms(), last[0])
        return (ms, last[1] + 1) if ms == last[0] else (ms, 0)
    if raw.endswith(b"-*"):
        ms = int(raw[:-2])
        entry_id = (ms, last[1] + 1) if ms == last[0] else (ms, 0)
    else:
        entry_id = parse_id(raw)
    if entry_id <= last:
        raise CommandError(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item"
        )
    return entry_id


def xadd(ks: Keyspace, a: list[bytes]) -> bytes | None:
    key, i = a[0], 1
    nomkstream, trims = False, []
    while True:
        opt = a[i].upper()
        if opt == b"NOMKSTREAM":
            nomkstream, i = True, i + 1
        elif opt in (b"MAXLEN", b"MINID"):
            start = i
            i += 2 if a[i + 1] not in (b"~", b"=") else 3
            if i < len(a) and a[i].upper() == b"LIMIT":
                i += 2
            trims.append(start)
        else:
            break
    fields = a[i + 1 :]
    if not fields or len(fields) % 2:
        raise CommandError("ERR wrong number of arguments for 'xadd' command")
    stream = ks.typed(key, Stream)
    if stream is None:
        if nomkstream:
            return None
        stream = Stream()
    entry_id = _next_id(ks, stream, a[i])
    ks.values[key] = stream
    stream.append(entry_id, list(fields))
    for start in trims:
        _trim(stream, a, start)
    return format_id(entry_id)


def xlen(ks: Keyspace, a: list[bytes]) -> int:
    stream = ks.typed(a[0], Stream)
    return 0 if stream is None else len(stream.ids)


def _count(a: list[bytes], i: int) -> int | None:
    if len(a) > i + 1 and a[i].upper() == b"COUNT":
        return parse_int(a[i + 1])
    return None


def xrange(ks: Keyspace, a: list[bytes]) -> list[Any]:
    stream = ks.typed(a[0], Stream)
    if stream is None:
        return []
    lo, hi = _range_id(a[1], end=False), _range_id(a[2], end=True)
    count = _count(a, 3)
    out: list[Any] = []
    for entry_id in stream.between(lo, hi):
        if count is not None and len(out) >= count:
            break
        out.append(_entry(stream, entry_id))
    return out


def xrevrange(ks: Keyspace, a: list[bytes]) -> list[Any]:
    stream = ks.typed(a[0], Stream)
    if stream is None:
        return []
    hi, lo = _range_id(a[1], end=True), _range_id(a[2], end=False)
    count = _count(a, 3)
    ids = list(stream.between(lo, hi))[::-1]
    return [_entry(stream, e) for e in (ids if count is None else ids[:count])]


def xdel(ks: Keyspace, a: list[bytes]) -> int:
    stream = ks.typed(a[0], Stream)
    if stream is None:
        return 0
    return sum(1 for raw in a[1:] if stream.delete(parse_id(raw)))


def xtrim(ks: Keyspace, a: list[bytes]) -> int:
    stream = ks.typed(a[0], Stream)
    return 0 if stream is None else _trim(stream, a, 1)[0]


# -- groups -----------------------------------------------------------------------------


def xgroup(ks: Keyspace, a: list[bytes]) -> Any:
    sub = a[0].upper()
    key = a[1]
    stream = ks.typed(key, Stream)
    if sub == b"CREATE":
        if stream is None:
            if b"MKSTREAM" not in [x.upper() for x in a[4:]]:
                raise CommandError(
                    "ERR The XGROUP subcommand requires the key to exist. Note that for "
                    "CREATE you may want to use the MKSTREAM option to create an empty "
                    "stream automatically."
                )
            stream = ks.values[key] = Stream()
        if a[2] in stream.groups:
            raise CommandError("BUSYGROUP Consumer Group name already exists")
        last = stream.last_id if a[3] == b"$" else parse_id(a[3])
        stream.groups[a[2]] = ConsumerGroup(last_id=last)
        return _OK
    if stream is None:
        raise CommandError("ERR The XGROUP subcommand requires the key to exist")
    if sub == b"DESTROY":
        return int(stream.groups.pop(a[2], None) is not None)
    _, group = _group(ks, key, a[2])
    if sub == b"DELCONSUMER":
        if group.consumers.pop(a[3], None) is None:
            return 0
        mine = [e for e, p in group.pending.items() if p.consumer == a[3]]
        for e in mine:
            del group.pending[e]
        return len(mine)
    if sub == b"CREATECONSUMER":
        new = a[3] not in group.consumers
        group.consumers.setdefault(a[3], ks.mono_ms())
        return int(new)
    if sub == b"SETID":
        group.last_id = stream.last_id if a[3] == b"$" else parse_id(a[3])
        return _OK
    raise CommandError(f"ERR unknown subcommand '{sub.decode(errors='replace')}'")


def _streams_args(a: list[bytes], i: int) -> tuple[list[bytes], list[bytes]]:
    rest = a[i:]
    half = len(rest) // 2
    if not rest or len(rest) % 2:
        raise CommandError("ERR Unbalanced 'xreadgroup' list of streams")
    return rest[:half], rest[half:]


def _read_options(a: list[bytes], i: int) -> tuple[int | None, int]:
    """COUNT and BLOCK/NOACK before STREAMS; returns (count, index after STREAMS)."""
    count = None
    while a[i].upper() != b"STREAMS":
        opt = a[i].upper()
        if opt == b"COUNT":
            count, i = parse_int(a[i + 1]), i + 2
        elif opt == b"BLOCK":
            i += 2
        elif opt == b"NOACK":
            i += 1
        else:
            raise CommandError("ERR syntax error")
    return count, i + 1


def xreadgroup(ks: Keyspace, a: list[bytes]) -> list[Any] | None:
    """XREADGROUP GROUP g c [COUNT n] [BLOCK ms] STREAMS key... id... (never blocks)."""
    group_name, consumer = a[1], a[2]
    count, i = _read_options(a, 3)
    keys, ids = _streams_args(a, i)
    out = []
    now = ks.mono_ms()
    for key, raw in zip(keys, ids, strict=True):
        stream, group = _group(ks, key, group_name)
        group.consumers[consumer] = now
        entries: list[Any] = []
        if raw == b">":
            for entry_id in stream.after(group.last_id):
                if count is not None and len(entries) >= count:
                    break
                group.last_id = entry_id
                group.entries_read += 1
                group.pending[entry_id] = Pending(consumer, now, 1)
                entries.append(_entry(stream, entry_id))
            if entries:
                out.append([key, entries])
            continue
        start = parse_id(raw)
        for entry_id, p in group.sorted_pending():
            if p.consumer != consumer or entry_id <= start:
                continue
            if count is not None and len(entries) >= count:
                break
            p.delivered_at, p.deliveries = now, p.deliveries + 1
            if entry_id in stream.entries:
                entries.append(_entry(stream, entry_id))
            else:
                entries.append([format_id(entry_id), None])
        out.append([key, entries])
    return out or None


def xread(ks: Keyspace, a: list[bytes]) -> list[Any] | None:
    """XREAD [COUNT n] [BLOCK ms] STREAMS key... id... (never blocks; '$' is resolved by
    the client before it waits)."""
    count, i = _read_options(a, 0)
    keys, ids = _streams_args(a, i)
    out: list[Any] = []
    for key, raw in zip(keys, ids, strict=True):
        stream = ks.typed(key, Stream)
        if stream is None or raw == b"$":
            continue
        entries: list[Any] = []
        for entry_id in stream.after(parse_id(raw)):
            if count is not None and len(entries) >= count:
                break
            entries.append(_entry(stream, entry_id))
        if entries:
            out.append([key, entries])
    return out or None


def xack(ks: Keyspace, a: list[bytes]) -> int:
    stream = ks.typed(a[0], Stream)
    group = None if stream is None else stream.groups.get(a[1])
    if group is None:
        return 0
    return sum(1 for raw in a[2:] if group.pending.pop(parse_id(raw), None) is not None)


def xpending(ks: Keyspace, a: list[bytes]) -> list[Any]:
    _, group = _group(ks, a[0], a[1])
    if len(a) == 2:
        if not group.pending:
            return [0, None, None, None]
        ordered = group.sorted_pending()
        per: dict[bytes, int] = {}
        for _, p in ordered:
            per[p.consumer] = per.get(p.consumer, 0) + 1
        return [
            len(ordered),
            format_id(ordered[0][0]),
            format_id(ordered[-1][0]),
            [[c, str(n).encode()] for c, n in per.items()],
        ]
    i, min_idle = 2, 0
    if a[2].upper() == b"IDLE":
        min_idle, i = parse_int(a[3]), 4
    lo, hi, count = _range_id(a[i], end=False), _range_id(a[i + 1], end=True), parse_int(a[i + 2])
    consumer = a[i + 3] if len(a) > i + 3 else None
    now = ks.mono_ms()
    out: list[Any] = []
    for entry_id, p in group.sorted_pending():
        if len(out) >= count:
            break
        idle = int(now - p.delivered_at)
        if (
            lo <= entry_id <= hi
            and (consumer is None or p.consumer == consumer)
            and (idle >= min_idle)
        ):
            out.append([format_id(entry_id), p.consumer, idle, p.deliveries])
    return out


def _claim_options(a: list[bytes], i: int) -> tuple[list[bytes], dict[bytes, bytes | None]]:
    ids: list[bytes] = []
    opts: dict[bytes, bytes | None] = {}
    while i < len(a):
        opt = a[i].upper()
        if opt in (b"JUSTID", b"FORCE"):
            opts[opt] = None
            i += 1
        elif opt in (b"IDLE", b"TIME", b"RETRYCOUNT", b"LASTID"):
            opts[opt] = a[i + 1]
            i += 2
        else:
            ids.append(a[i])
            i += 1
    return ids, opts


def xclaim(ks: Keyspace, a: list[bytes]) -> list[Any]:
    stream, group = _group(ks, a[0], a[1])
    consumer, min_idle = a[2], parse_int(a[3])
    raw_ids, opts = _claim_options(a, 4)
    now = ks.mono_ms()
    justid = b"JUSTID" in opts
    group.consumers.setdefault(consumer, now)
    out: list[Any] = []
    for raw in raw_ids:
        entry_id = parse_id(raw)
        p = group.pending.get(entry_id)
        if p is None:
            continue
        if now - p.delivered_at < min_idle:
            continue
        if entry_id not in stream.entries:
            del group.pending[entry_id]  # a deleted entry leaves the pending list
            continue
        idle = opts.get(b"IDLE")
        p.consumer = consumer
        p.delivered_at = now - (parse_int(idle) if idle is not None else 0)
        if b"RETRYCOUNT" in opts:
            p.deliveries = parse_int(opts[b"RETRYCOUNT"] or b"0")
        elif not justid:
            p.deliveries += 1
        out.append(format_id(entry_id) if justid else _entry(stream, entry_id))
    return out


def xautoclaim(ks: Keyspace, a: list[bytes]) -> list[Any]:
    stream, group = _group(ks, a[0], a[1])
    consumer, min_idle, start = a[2], parse_int(a[3]), parse_id(a[4])
    count, justid = 100, False
    i = 5
    while i < len(a):
        if a[i].upper() == b"COUNT":
            count, i = parse_int(a[i + 1]), i + 2
        else:
            justid, i = True, i + 1
    now = ks.mono_ms()
    group.consumers.setdefault(consumer, now)
    claimed: list[Any] = []
    deleted: list[bytes] = []
    cursor = b"0-0"
    scanned = 0
    for entry_id, p in group.sorted_pending():
        if entry_id < start:
            continue
        if scanned >= count:
            cursor = format_id(entry_id)
            break
        scanned += 1
        if now - p.delivered_at < min_idle:
            continue
        if entry_id not in stream.entries:
            del group.pending[entry_id]
            deleted.append(format_id(entry_id))
            continue
        p.consumer, p.delivered_at = consumer, now
        if not justid:
            p.deliveries += 1
        claimed.append(format_id(entry_id) if justid else _entry(stream, entry_id))
    return [cursor, claimed, deleted]


def xinfo(ks: Keyspace, a: list[bytes]) -> list[Any]:
    sub = a[0].upper()
    stream = ks.typed(a[1], Stream)
    if stream is None:
        raise CommandError("ERR no such key")
    if sub != b"GROUPS":
        raise CommandError(f"ERR XINFO {sub.decode(errors='replace')} is not supported here")
    out = []
    for name, g in stream.groups.items():
        lag = sum(1 for _ in stream.after(g.last_id))
        out.append(
            [
                b"name", name, b"consumers", len(g.consumers), b"pending", len(g.pending),
                b"last-delivered-id", format_id(g.last_id), b"entries-read", g.entries_read,
                b"lag", lag,
            ]
        )  # fmt: skip
    return out


STREAM_COMMANDS: dict[bytes, Command] = {
    b"XADD": xadd,
    b"XLEN": xlen,
    b"XRANGE": xrange,
    b"XREVRANGE": xrevrange,
    b"XDEL": xdel,
    b"XTRIM": xtrim,
    b"XGROUP": xgroup,
    b"XREADGROUP": xreadgroup,
    b"XREAD": xread,
    b"XACK": xack,
    b"XPENDING": xpending,
    b"XCLAIM": xclaim,
    b"XAUTOCLAIM": xautoclaim,
    b"XINFO": xinfo,
}
"""The stream commands, by name."""
