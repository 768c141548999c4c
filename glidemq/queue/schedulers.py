"""Job schedulers: a template job added to a queue on a cron or fixed-interval schedule.

A scheduler is one field of the queue's `schedulers` hash (field = scheduler name, value = a
JSON entry with the schedule, the job template and the next run, in glide-mq's
`SchedulerEntry` layout). Every running Worker fires due schedulers from its promotion loop;
the server's fire call adds the job only if the entry is still the one the worker read, and
stores the following run in the same call, so however many workers see a due run, exactly one
job is added for it. Each run's job has the id `repeat-<scheduler>-<run time in ms>`.

Runs missed while no worker was running are not made up: the first worker to see the
scheduler fires once (for the oldest missed run) and schedules the next run after now.

With `repeat_after_complete` a scheduler never overlaps its own jobs: firing a run records
the run's job id in the entry (`awaiting`) instead of the next run; a worker that finds that
job finished (completed, failed for good, or gone) plans the next run from its finish time
(`every_ms` later, or the cron's next time after it) with the same compare-and-set.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from ..client.context import QueueContext
from ..encoding.serialize import encode_data
from ..errors import GlideMQError, PayloadTooLargeError, ServerError, ValidationError
from ..keys import validate_job_id, validate_job_name
from ..timing.cron import CronExpression, parse_cron, resolve_tz
from ..types import Backoff, JobOptions, from_mapping, retention_from_wire
from ..wire import adds, codes, send

__all__ = ["JobScheduler", "JobTemplate", "SchedulerRunner"]

MAX_SCHEDULER_NAME = 200  # leaves room for the run's job id
_CAS_TRIES = 20


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """The job a scheduler adds on each run: `name` (default: the scheduler's name), `data`
    and `opts`. Each run gets its own job id, so `opts.job_id` and deduplication are refused."""

    name: str | None = None
    data: Any = None
    opts: JobOptions = field(default_factory=JobOptions)

    def __post_init__(self) -> None:
        if self.name is not None:
            validate_job_name(self.name, "template.name")
        if not isinstance(self.opts, JobOptions):
            raise ValidationError("template.opts", "must be JobOptions or a dict of them")
        if self.opts.job_id is not None:
            raise ValidationError(
                "template.opts.job_id", "each run gets its own id (repeat-<scheduler>-<time>)"
            )
        if self.opts.deduplication is not None:
            raise ValidationError("template.opts.deduplication", "not supported on schedulers")

    @classmethod
    def coerce(cls, value: JobTemplate | Mapping[str, Any] | None) -> JobTemplate:
        """A template from a template, a dict with keys name / data / opts, or None."""
        if value is None:
            return cls()
        if isinstance(value, JobTemplate):
            return value
        if not isinstance(value, Mapping):
            raise ValidationError("template", f"expected JobTemplate or a dict, got {value!r}")
        values = dict(value)
        if values.get("opts") is None:
            values.pop("opts", None)
        else:
            try:
                values["opts"] = JobOptions.coerce(values["opts"])
            except ValidationError as exc:
                raise ValidationError(f"template.opts.{exc.field}", exc.reason) from None
        try:
            return from_mapping(cls, values)
        except ValidationError as exc:
            if exc.field.startswith("template"):
                raise
            raise ValidationError(f"template.{exc.field}", exc.reason) from None


@dataclass(frozen=True, slots=True)
class JobScheduler:
    """A stored job scheduler. Times are epoch milliseconds.

    `next_run`: when it fires next; `last_run`: the run time of its last job (None before the
    first); `count`: jobs it has added (kept across upserts, reset by removing it);
    `compress`: job data is stored compressed (set by a Queue with `compression=True`);
    `repeat_after_complete`: the next run is planned when the previous run's job finished;
    `awaiting`: the id of that job while it has not finished (then `next_run` is the run
    that added it).
    """

    name: str
    cron: str | None
    every_ms: int | None
    tz: str | None
    start_date: int | None
    end_date: int | None
    limit: int | None
    template: JobTemplate
    next_run: int
    last_run: int | None
    count: int
    compress: bool = False
    repeat_after_complete: bool = False
    awaiting: str | None = None

    def job_id(self, run: int) -> str:
        """The id of the job this scheduler adds for the run at `run` ms."""
        return f"repeat-{self.name}-{run}"


# -- entries -------------------------------------------------------------------------------


def _ms(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError(name, "a datetime must be timezone-aware")
        return int(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(name, f"must be epoch ms or an aware datetime, got {value!r}")
    return value


@functools.lru_cache(maxsize=256)
def _cron(expression: str, tz: str | None) -> CronExpression:
    return parse_cron(expression, tz)


def _opts_from_wire(wire: Mapping[str, Any]) -> JobOptions:
    """JobOptions from the `opts` JSON of a template (the job hash's camelCase layout)."""
    kw: dict[str, Any] = {}
    for key, name in (
        ("delay", "delay"),
        ("priority", "priority"),
        ("attempts", "attempts"),
        ("timeout", "timeout"),
        ("ttl", "ttl"),
    ):
        if key in wire:
            kw[name] = wire[key]
    b = wire.get("backoff")
    if isinstance(b, Mapping):
        kw["backoff"] = Backoff(**{k: b[k] for k in ("type", "delay", "jitter") if k in b})
    for key, name in (
        ("removeOnComplete", "remove_on_complete"),
        ("removeOnFail", "remove_on_fail"),
    ):
        if key in wire:
            kw[name] = retention_from_wire(wire[key])
    return JobOptions(**kw)


_DEFAULT_OPTIONS = dataclasses.asdict(JobOptions())


def options_of_wire(wire: Mapping[str, Any]) -> dict[str, Any]:
    """The main options of a stored `opts` JSON (delay, priority, attempts, timeout, ttl,
    backoff, retention) by their Python names, as `JobOptions.coerce` reads them."""
    return _options_dict(_opts_from_wire(wire))


def _options_dict(opts: JobOptions) -> dict[str, Any]:
    """The options that differ from the defaults, by their Python names (JobOptions.coerce
    reads them back, nested options included)."""
    return {k: v for k, v in dataclasses.asdict(opts).items() if v != _DEFAULT_OPTIONS.get(k)}


def decode_entry(name: str, raw: bytes | str) -> JobScheduler:
    """A scheduler from its stored JSON; ValidationError when it cannot be read."""
    try:
        e = orjson.loads(raw)
        t = e.get("template") or {}
        if "options" in t:  # written by glidemq
            opts = JobOptions.coerce(t["options"])
        else:  # written by another producer: the job-hash `opts` layout
            opts = _opts_from_wire(t.get("opts") or {})
        return JobScheduler(
            name=name,
            cron=e.get("pattern"),
            every_ms=e.get("every"),
            tz=e.get("tz"),
            start_date=e.get("startDate"),
            end_date=e.get("endDate"),
            limit=e.get("limit"),
            template=JobTemplate(t.get("name"), t.get("data"), opts),
            next_run=int(e["nextRun"]),
            last_run=e.get("lastRun"),
            count=int(e.get("iterationCount", 0)),
            compress=e.get("compress") is True,
            repeat_after_complete=e.get("repeatAfterComplete") is True,
            awaiting=e.get("awaiting"),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValidationError(f"scheduler {name!r}", f"unreadable entry: {exc}") from None


def encode_entry(s: JobScheduler) -> bytes:
    """The stored JSON of a scheduler."""
    entry: dict[str, Any] = {}
    for key, value in (
        ("pattern", s.cron),
        ("every", s.every_ms),
        ("tz", s.tz),
        ("startDate", s.start_date),
        ("endDate", s.end_date),
        ("limit", s.limit),
    ):
        if value is not None:
            entry[key] = value
    # `opts` in the job hash's layout for other readers, `options` for an exact round trip
    template: dict[str, Any] = {
        "data": s.template.data,
        "opts": s.template.opts.to_wire(),
        "options": _options_dict(s.template.opts),
    }
    if s.template.name is not None:
        template["name"] = s.template.name
    entry["template"] = template
    entry["nextRun"] = s.next_run
    if s.last_run is not None:
        entry["lastRun"] = s.last_run
    entry["iterationCount"] = s.count
    if s.compress:
        entry["compress"] = True
    if s.repeat_after_complete:
        entry["repeatAfterComplete"] = True
    if s.awaiting is not None:
        entry["awaiting"] = s.awaiting
    return orjson.dumps(entry)


def _sha1(raw: bytes) -> str:
    # a version tag of the entry, compared with the server's redis.sha1hex
    return hashlib.sha1(raw).hexdigest()


# -- planning runs ---------------------------------------------------------------------------


def _after(s: JobScheduler, ts: int) -> int:
    """The first run strictly after `ts` (for every_ms: on the grid of its first run)."""
    if s.cron is not None:
        return _cron(s.cron, s.tz).next_after(ts)
    assert s.every_ms is not None
    anchor = s.next_run
    if ts < anchor:
        return anchor
    return anchor + ((ts - anchor) // s.every_ms + 1) * s.every_ms


def _first_run(s: JobScheduler, now: int, last_run: int | None) -> int:
    """When a new (or re-scheduled) scheduler runs first: for cron, its first time at or after
    max(now, start_date); for every_ms, start_date (or the next run on its grid once that
    passed), else one interval after its last run, else now."""
    start = max(now, s.start_date or 0)
    if s.cron is not None:
        return _cron(s.cron, s.tz).next_after(start - 1)
    assert s.every_ms is not None
    if s.start_date is not None:
        if s.start_date >= now:
            return s.start_date
        return s.start_date + -(-(now - s.start_date) // s.every_ms) * s.every_ms
    if last_run is not None:
        return max(now, last_run + s.every_ms)
    return now


def _finished(s: JobScheduler, next_run: int, count: int) -> bool:
    """True when the scheduler has no run left after `count` jobs."""
    if s.limit is not None and count >= s.limit:
        return True
    return s.end_date is not None and next_run > s.end_date


def _same_schedule(a: JobScheduler, b: JobScheduler) -> bool:
    return (a.cron, a.every_ms, a.tz, a.start_date, a.repeat_after_complete) == (
        b.cron,
        b.every_ms,
        b.tz,
        b.start_date,
        b.repeat_after_complete,
    )


def build(
    name: str,
    *,
    cron: str | None,
    every_ms: int | None,
    tz: str | None,
    start_date: int | datetime | None,
    end_date: int | datetime | None,
    limit: int | None,
    template: JobTemplate | Mapping[str, Any] | None,
    compress: bool,
    repeat_after_complete: bool = False,
) -> JobScheduler:
    """A validated scheduler, not yet placed in time (next_run 0)."""
    validate_job_id(name, "name")
    if len(name) > MAX_SCHEDULER_NAME:
        raise ValidationError("name", f"longer than {MAX_SCHEDULER_NAME} characters")
    if (cron is None) == (every_ms is None):
        raise ValidationError("cron", "give exactly one of cron= and every_ms=")
    if every_ms is not None:
        if isinstance(every_ms, bool) or not isinstance(every_ms, int) or every_ms < 1:
            raise ValidationError("every_ms", f"must be an integer >= 1, got {every_ms!r}")
        if tz is not None:
            raise ValidationError("tz", "applies to cron schedules only")
    if cron is not None:
        if tz is not None:
            resolve_tz(tz)  # a clear error for an unknown zone before the cron's own checks
            if not isinstance(tz, str):
                raise ValidationError("tz", "must be an IANA time zone name")
        _cron(cron, tz)
    start, end = _ms("start_date", start_date), _ms("end_date", end_date)
    if start is not None and end is not None and end < start:
        raise ValidationError("end_date", "is before start_date")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValidationError("limit", f"must be an integer >= 1, got {limit!r}")
    if not isinstance(repeat_after_complete, bool):
        raise ValidationError("repeat_after_complete", "must be a bool")
    tmpl = JobTemplate.coerce(template)
    try:
        encode_data(tmpl.data, compress=compress)  # JSON-serializable, within the size limit
    except PayloadTooLargeError as exc:
        raise PayloadTooLargeError(exc.size, exc.limit, "template.data") from None
    except ValidationError as exc:
        raise ValidationError("template.data", exc.reason) from None
    return JobScheduler(
        name,
        cron,
        every_ms,
        tz,
        start,
        end,
        limit,
        tmpl,
        0,
        None,
        0,
        compress,
        repeat_after_complete,
    )


def place(new: JobScheduler, old: JobScheduler | None, now: int) -> JobScheduler:
    """`new` placed in time, taking over from `old` (the stored entry of the same name): an
    unchanged schedule keeps its next run, a changed one is planned afresh; the job count
    carries over, and so does the job a `repeat_after_complete` scheduler still waits for."""
    count = old.count if old else 0
    last_run = old.last_run if old else None
    if old is not None and _same_schedule(old, new):
        next_run = old.next_run
    else:
        next_run = _first_run(new, now, last_run)
    if new.limit is not None and count >= new.limit:
        raise ValidationError("limit", f"already reached: this scheduler added {count} jobs")
    if new.end_date is not None and next_run > new.end_date:
        raise ValidationError("end_date", "no run left before end_date")
    awaiting = old.awaiting if old is not None and new.repeat_after_complete else None
    return dataclasses.replace(
        new, next_run=next_run, last_run=last_run, count=count, awaiting=awaiting
    )


# -- server calls ----------------------------------------------------------------------------


def schedulers_key(ctx: QueueContext) -> str:
    return ctx.keys.base + "schedulers"


async def upsert(ctx: QueueContext, new: JobScheduler, now: int) -> JobScheduler:
    """Store `new`, replacing the scheduler of the same name (compare-and-set: a worker
    firing it at the same moment makes this re-read and try again)."""
    key = schedulers_key(ctx)
    for _ in range(_CAS_TRIES):
        raw = await ctx.command(lambda c: c.hget(key, new.name))
        old = None
        if raw is not None:
            try:
                old = decode_entry(new.name, raw)
            except ValidationError:
                old = None  # an unreadable entry is replaced
        placed = place(new, old, now)
        old_sha1 = "" if raw is None else _sha1(raw)
        call = adds.set_scheduler_call(key, new.name, old_sha1, encode_entry(placed))
        written = await send(ctx, call)
        if int(written) == 1:
            return placed
    raise ServerError(f"scheduler {new.name!r} changed under every attempt to update it")


async def get(ctx: QueueContext, name: str) -> JobScheduler | None:
    raw = await ctx.command(lambda c: c.hget(schedulers_key(ctx), name))
    return None if raw is None else decode_entry(name, raw)


async def get_all(ctx: QueueContext) -> list[JobScheduler]:
    raw = await ctx.command(lambda c: c.hgetall(schedulers_key(ctx)))
    out = [decode_entry(k.decode(), v) for k, v in (raw or {}).items()]
    return sorted(out, key=lambda s: (s.next_run, s.name))


async def remove(ctx: QueueContext, name: str) -> bool:
    n = await ctx.command(lambda c: c.hdel(schedulers_key(ctx), [name]))
    if n:
        await ctx.confirm_writes("remove_job_scheduler")
    return bool(n)


def _add_args(s: JobScheduler, run: int, now: int) -> list[str | bytes]:
    """The add arguments (`glidemq.wire.adds.job_args`) of the job of the run at `run`."""
    opts = s.template.opts
    return adds.job_args(
        s.template.name or s.name,
        encode_data(s.template.data, compress=s.compress),
        orjson.dumps(opts.to_wire()),
        now,
        opts,
        s.job_id(run),
    )


def plan_fire(s: JobScheduler, now: int) -> tuple[bytes, int | None]:
    """The entry to store after firing the due run `s.next_run` at `now`, and the run after
    it (None when this was the last, or not known before its job finished). Runs missed
    before now are skipped."""
    count = s.count + 1
    if s.repeat_after_complete:
        if s.limit is not None and count >= s.limit:
            return b"", None
        waiting = dataclasses.replace(
            s, last_run=s.next_run, count=count, awaiting=s.job_id(s.next_run)
        )
        return encode_entry(waiting), None
    nxt = _after(s, max(now, s.next_run))
    if _finished(s, nxt, count):
        return b"", None
    fired = dataclasses.replace(s, next_run=nxt, last_run=s.next_run, count=count)
    return encode_entry(fired), nxt


def plan_after(s: JobScheduler, finished_on: int) -> JobScheduler | None:
    """`s` once the job it waited for finished at `finished_on`: its next run planned from
    then, or None when no run is left before its end date."""
    if s.cron is not None:
        nxt = _cron(s.cron, s.tz).next_after(finished_on)
    else:
        assert s.every_ms is not None
        nxt = finished_on + s.every_ms
    if s.end_date is not None and nxt > s.end_date:
        return None
    return dataclasses.replace(s, next_run=nxt, awaiting=None)


_FINISHED_STATES = (b"completed", b"failed")


async def _awaited_finish(ctx: QueueContext, job_id: str, now: int) -> int | None:
    """When the awaited job finished (now if it is gone), or None while it has not."""
    state, finished_on = await ctx.command(
        lambda c: c.hmget(ctx.keys.job(job_id), ["state", "finishedOn"])
    )
    if state is None:
        return now
    if state not in _FINISHED_STATES:
        return None
    return int(finished_on) if finished_on else now


class SchedulerRunner:
    """Fires the due job schedulers of one queue; each Worker's promotion loop runs one."""

    def __init__(self, on_error: Callable[[BaseException], None]) -> None:
        self.on_error = on_error
        self._bad: set[bytes] = set()  # unreadable entries already reported

    async def fire_due(self, ctx: QueueContext, now: int) -> int | None:
        """Fire every due scheduler once; the earliest next run (ms), None if there is none."""
        key = schedulers_key(ctx)
        raw = await ctx.command(lambda c: c.hgetall(key))
        if not raw:
            return None
        earliest: int | None = None
        k = ctx.keys
        for name_b, value in raw.items():
            name = name_b.decode()
            try:
                s = decode_entry(name, value)
            except ValidationError as exc:
                if value not in self._bad:
                    if len(self._bad) > 1000:
                        self._bad.clear()
                    self._bad.add(value)
                    self.on_error(exc)
                continue
            if s.awaiting is not None:
                try:
                    found = await self._resume(ctx, s, value, now)
                except GlideMQError as exc:
                    self.on_error(exc)
                    continue
                if found is None:
                    continue  # still running, or another worker moved it on
                s, value = found
            nxt: int | None = s.next_run
            if s.next_run <= now:
                try:
                    entry, nxt = plan_fire(s, now)
                    args = _add_args(s, s.next_run, now)
                except GlideMQError as exc:  # a template that no longer encodes, a bad cron
                    self.on_error(exc)
                    continue
                call = adds.fire_scheduler_call(key, k, name, _sha1(value), entry, args)
                status, reply = await send(ctx, call)
                reply_s = reply.decode() if isinstance(reply, bytes) else str(reply)
                if status == b"fired" and codes.is_error(reply_s):
                    self.on_error(ServerError(f"scheduler {name!r}: adding its job: {reply_s}"))
                elif status != b"fired":
                    nxt = None  # another worker fired it; the next read has the new entry
            if nxt is not None and (earliest is None or nxt < earliest):
                earliest = nxt
        return earliest

    async def _resume(
        self, ctx: QueueContext, s: JobScheduler, raw: bytes, now: int
    ) -> tuple[JobScheduler, bytes] | None:
        """Plan the next run of a `repeat_after_complete` scheduler whose job finished:
        the stored scheduler and its entry, or None while the job runs (or when another
        worker changed the entry first, or no run is left and it was removed)."""
        assert s.awaiting is not None
        finished_on = await _awaited_finish(ctx, s.awaiting, now)
        if finished_on is None:
            return None
        after = plan_after(s, finished_on)
        entry = b"" if after is None else encode_entry(after)
        call = adds.set_scheduler_call(schedulers_key(ctx), s.name, _sha1(raw), entry)
        written = await send(ctx, call)
        if int(written) != 1 or after is None:
            return None
        return after, entry
