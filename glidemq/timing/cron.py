"""Cron expressions: parse one and find its next run after a given instant, in a time zone.

Five fields, `minute hour day-of-month month day-of-week`, or six with a leading `second`
field (an extension of classic cron, handy for sub-minute schedules). Each field takes `*`,
numbers, ranges `a-b`, steps `*/n`, `a/n`, `a-b/n` and comma lists; months and weekdays take
three-letter English names (`jan`, `mon`), case-insensitive; weekday 0 and 7 are Sunday. `?`
is accepted as `*` in the two day fields. Macros: `@yearly` (`@annually`), `@monthly`,
`@weekly`, `@daily` (`@midnight`), `@hourly`.

Day of month and day of week follow the classic rule: when both are restricted (neither
starts with `*` or `?`) a day matches if either matches; otherwise both must match.

Times are wall-clock times in the expression's time zone (UTC by default). Around daylight
saving changes:

- a wall time that does not exist (the clock jumps from 02:00 to 03:00) runs at the same
  offset from the jump as it would have had, so `30 2 * * *` runs at 03:30 that day. When the
  hour field is `*`-based, times inside the gap are simply skipped (the hour after the jump
  has its own runs).
- a wall time that happens twice (the clock goes back from 03:00 to 02:00) runs once, at its
  first occurrence; when the hour field is `*`-based it runs at both, so an every-minute
  schedule keeps running through the repeated hour.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ValidationError

__all__ = ["CronExpression", "parse_cron", "resolve_tz"]

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (name, low, high, names whose index + offset is the value)
_SPECS = (
    ("second", 0, 59, (), 0),
    ("minute", 0, 59, (), 0),
    ("hour", 0, 23, (), 0),
    ("day of month", 1, 31, (), 0),
    ("month", 1, 12, _MONTHS, 1),
    ("day of week", 0, 7, _DAYS, 0),
)
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# Far enough to cover the 28-year cycle of the Gregorian calendar (weekday + date combinations).
_HORIZON_YEARS = 30
# Larger than any daylight-saving or zone-offset change (seconds).
_MAX_SHIFT = 3 * 3600
# Offset changes crossed (and repeats skipped) while looking for one run.
_MAX_STEPS = 10_000


def resolve_tz(tz: str | tzinfo | None) -> tzinfo:
    """A tzinfo for `tz` (an IANA name such as 'Europe/Berlin', a tzinfo, or None for UTC)."""
    if tz is None:
        return UTC
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str) or not tz:
        raise ValidationError("tz", f"must be an IANA time zone name, got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            "tz", f"unknown time zone {tz!r} (an IANA name such as 'Europe/Berlin')"
        ) from None


def _value(token: str, field: str, low: int, high: int, names: tuple[str, ...], base: int) -> int:
    lower = token.lower()
    if names and lower in names:
        return names.index(lower) + base
    if not token.isdigit():
        raise ValidationError("cron", f"{field}: {token!r} is not a number or a name")
    n = int(token)
    if not low <= n <= high:
        raise ValidationError("cron", f"{field}: {n} is out of range {low}-{high}")
    return n


def _field(text: str, spec: tuple[str, int, int, tuple[str, ...], int]) -> frozenset[int]:
    field, low, high, names, base = spec
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ValidationError("cron", f"{field}: empty list item in {text!r}")
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValidationError("cron", f"{field}: step {step_text!r} must be a number > 0")
            step = int(step_text)
        if rng in ("*", "?"):
            start, stop = low, high
        elif "-" in rng:
            a, _, b = rng.partition("-")
            start = _value(a, field, low, high, names, base)
            stop = _value(b, field, low, high, names, base)
            if start > stop:
                raise ValidationError("cron", f"{field}: range {rng!r} runs backwards")
        else:
            start = _value(rng, field, low, high, names, base)
            stop = high if step_text else start  # `a/n`: from a to the end, every n
        out.update(range(start, stop + 1, step))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class CronExpression:
    """A parsed cron expression bound to a time zone; `next_after(ts_ms)` gives its next run."""

    expression: str
    tz: tzinfo
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: tuple[int, ...]
    weekdays: frozenset[int]
    day_or: bool  # both day fields restricted: either may match
    hour_star: bool  # the hour field starts with '*': DST gaps skip, overlaps run twice

    def _day_ok(self, d: date) -> bool:
        dom = d.day in self.days
        dow = d.isoweekday() % 7 in self.weekdays
        return (dom or dow) if self.day_or else (dom and dow)

    def _next_wall(self, t: datetime) -> datetime | None:
        """The first naive wall time >= t (whole seconds) that matches, or None."""
        last_year = t.year + _HORIZON_YEARS
        while t.year <= last_year:
            if t.month not in self.months:
                i = bisect.bisect_right(self.months, t.month)
                year = t.year if i < len(self.months) else t.year + 1
                t = datetime(year, self.months[i % len(self.months)], 1)
                continue
            if not self._day_ok(t.date()):
                t = datetime(t.year, t.month, t.day) + timedelta(days=1)
                continue
            for attr, allowed, unit in (
                ("hour", self.hours, timedelta(days=1)),
                ("minute", self.minutes, timedelta(hours=1)),
                ("second", self.seconds, timedelta(minutes=1)),
            ):
                value = getattr(t, attr)
                if value in allowed:
                    continue
                i = bisect.bisect_right(allowed, value)
                if i < len(allowed):
                    t = _set(_floor(t, attr), attr, allowed[i])
                else:
                    t = _floor(t, _PARENT[attr]) + unit
                break
            else:
                return t
        return None

    def _offset(self, t: int) -> int:
        """The zone's UTC offset in seconds at epoch second `t`."""
        off = datetime.fromtimestamp(t, self.tz).utcoffset()
        return 0 if off is None else int(off.total_seconds())

    def _change(self, lo: int, hi: int, off: int) -> int:
        """The first second in (lo, hi] whose offset is not `off` (lo has `off`, hi not)."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offset(mid) == off:
                lo = mid
            else:
                hi = mid
        return hi

    def _gap_run(self, change: int, before: int, after: int, not_before: int) -> int | None:
        """Clocks jumped forward at `change`: the first run >= `not_before` of a wall time
        inside the gap, moved forward by the gap (see the module doc)."""
        start = max(_wall(change, before), _wall(not_before, before))
        found = self._next_wall(start)
        if found is None or found >= _wall(change, after):
            return None
        return _epoch(found) - before

    def next_after(self, ts_ms: int) -> int:
        """The first run strictly after `ts_ms` (epoch ms), in epoch ms."""
        t = ts_ms // 1000 + 1  # runs fall on whole seconds
        gap: int | None = None
        if not self.hour_star:
            # A jump forward just before `t` leaves gap wall times that still run after it.
            back = t - _MAX_SHIFT
            before, now_off = self._offset(back), self._offset(t)
            if before < now_off:
                gap = self._gap_run(self._change(back, t, before), before, now_off, t)
        for _ in range(_MAX_STEPS):
            off = self._offset(t)
            found = self._next_wall(_wall(t, off))
            if found is None:
                break
            cand = _epoch(found) - off
            if self._offset(cand) != off:
                # The offset changes before `cand`: go on from the change.
                change = self._change(t, cand, off)
                after = self._offset(change)
                if after > off:  # jump forward: wall times in the gap do not exist
                    if not self.hour_star:
                        g = self._gap_run(change, off, after, t)
                        if g is not None:
                            gap = g if gap is None else min(gap, g)
                    t = change
                else:  # jump back: wall times repeat; only '*' hours run them twice
                    t = change if self.hour_star else change + (off - after)
                continue
            first = found.replace(tzinfo=self.tz, fold=0).utcoffset()
            first_off = off if first is None else int(first.total_seconds())
            if first_off > off:
                # `found` happens twice and `cand` is its repeat; its first run may still be
                # ahead (when the scan crossed two offset changes).
                if _epoch(found) - first_off >= t:
                    cand = _epoch(found) - first_off
                elif not self.hour_star:
                    # the repeat of a wall time that already ran: skip past the repeat
                    lo, hi = cand, cand + first_off - off
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        if datetime.fromtimestamp(mid, self.tz).fold:
                            lo = mid
                        else:
                            hi = mid
                    t = hi
                    continue
            return (cand if gap is None else min(gap, cand)) * 1000
        if gap is not None:
            return gap * 1000
        raise ValidationError("cron", f"{self.expression!r} never runs")


def _wall(t: int, off: int) -> datetime:
    """The naive wall time of epoch second `t` at UTC offset `off` seconds."""
    return datetime.fromtimestamp(t + off, UTC).replace(tzinfo=None)


def _epoch(wall: datetime) -> int:
    """Epoch seconds of a naive wall time read as UTC."""
    return int(wall.replace(tzinfo=UTC).timestamp())


_PARENT = {"hour": "day", "minute": "hour", "second": "minute"}


def _set(t: datetime, unit: str, value: int) -> datetime:
    if unit == "hour":
        return t.replace(hour=value)
    if unit == "minute":
        return t.replace(minute=value)
    return t.replace(second=value)


def _floor(t: datetime, unit: str) -> datetime:
    if unit == "day":
        return t.replace(hour=0, minute=0, second=0)
    if unit == "hour":
        return t.replace(minute=0, second=0)
    if unit == "minute":
        return t.replace(second=0)
    return t


def parse_cron(expression: str, tz: str | tzinfo | None = None) -> CronExpression:
    """Parse a 5-field (or 6-field, with leading seconds) cron expression; raise
    ValidationError naming the problem when it is malformed or can never run."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError("cron", "must be a non-empty string")
    zone = resolve_tz(tz)
    text = _MACROS.get(expression.strip().lower(), expression)
    parts = text.split()
    if len(parts) == 5:
        parts = ["0", *parts]
    elif len(parts) != 6:
        raise ValidationError(
            "cron", f"{expression!r} has {len(parts)} fields; expected 5 (or 6 with seconds)"
        )
    sec, minute, hour, dom, month, dow = (_field(p, s) for p, s in zip(parts, _SPECS, strict=True))
    weekdays = frozenset(d % 7 for d in dow)
    dom_star = parts[3][0] in "*?"
    dow_star = parts[5][0] in "*?"
    months = tuple(sorted(month))
    if not dom_star and dow_star and not any(d <= _MAX_DAYS[m - 1] for m in months for d in dom):
        raise ValidationError("cron", f"{expression!r} never runs: no such day in those months")
    cron = CronExpression(
        expression=expression,
        tz=zone,
        seconds=tuple(sorted(sec)),
        minutes=tuple(sorted(minute)),
        hours=tuple(sorted(hour)),
        days=frozenset(dom),
        months=months,
        weekdays=weekdays,
        day_or=not dom_star and not dow_star,
        hour_star=parts[2][0] == "*",
    )
    return cron
