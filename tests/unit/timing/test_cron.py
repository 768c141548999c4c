"""The cron parser: syntax, errors, next runs, time zones and daylight-saving changes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from glidemq import ValidationError
from glidemq.timing.cron import parse_cron


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _runs(expr: str, start: datetime, n: int, tz: str | None = None) -> list[datetime]:
    cron = parse_cron(expr, tz)
    zone = ZoneInfo(tz) if tz else UTC
    out, t = [], _ms(start)
    for _ in range(n):
        t = cron.next_after(t)
        out.append(datetime.fromtimestamp(t / 1000, zone))
    return out


JAN1 = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("*/15 * * * *", ["00:15", "00:30", "00:45", "01:00"]),
        ("5,10-12 3 * * *", ["03:05", "03:10", "03:11", "03:12"]),
        ("0 0-23/6 * * *", ["06:00", "12:00", "18:00", "00:00"]),
        ("30 9/4 * * *", ["09:30", "13:30", "17:30", "21:30"]),
        ("@hourly", ["01:00", "02:00", "03:00", "04:00"]),
    ],
)
def test_minutes_hours_lists_ranges_steps(expr: str, expected: list[str]) -> None:
    assert [d.strftime("%H:%M") for d in _runs(expr, JAN1, 4)] == expected


def test_seconds_field_is_an_optional_sixth_leading_field() -> None:
    runs = _runs("*/20 * * * * *", JAN1, 4)
    assert [d.strftime("%M:%S") for d in runs] == ["00:20", "00:40", "01:00", "01:20"]
    assert _runs("15 30 2 * * *", JAN1, 1)[0] == datetime(2026, 1, 1, 2, 30, 15, tzinfo=UTC)


def test_names_are_case_insensitive_and_seven_is_sunday() -> None:
    assert _runs("0 0 * * MON-wed", JAN1, 3)[0].date() == datetime(2026, 1, 5).date()
    assert [d.day for d in _runs("0 0 * * 7", JAN1, 2)] == [4, 11]
    assert [d.day for d in _runs("0 0 * * 0", JAN1, 2)] == [4, 11]
    assert [d.month for d in _runs("0 0 1 JAN,jul *", JAN1, 2)] == [7, 1]


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # both restricted: the 13th or any Friday
    days = [d.day for d in _runs("0 0 13 * fri", JAN1, 4)]
    assert days == [2, 9, 13, 16]
    # one of them '*'-based: both must match (Fridays that are odd days)
    days = [d.day for d in _runs("0 0 */2 * fri", JAN1, 3)]
    assert days == [9, 23, 13]  # Jan 9, Jan 23, Feb 13


def test_leap_day_and_month_ends() -> None:
    assert [d.year for d in _runs("0 0 29 2 *", JAN1, 3)] == [2028, 2032, 2036]
    assert [d.month for d in _runs("0 0 31 * *", JAN1, 3)] == [1, 3, 5]


def test_next_after_is_strictly_after() -> None:
    cron = parse_cron("0 * * * *")
    on_the_hour = _ms(datetime(2026, 1, 1, 5, tzinfo=UTC))
    assert cron.next_after(on_the_hour) == on_the_hour + 3_600_000
    assert cron.next_after(on_the_hour - 1) == on_the_hour


def test_time_zone_shifts_the_runs() -> None:
    run = _runs("0 9 * * *", JAN1, 1, "America/New_York")[0]
    assert run.astimezone(UTC).hour == 14  # EST, UTC-5
    july = datetime(2026, 7, 1, tzinfo=UTC)
    assert _runs("0 9 * * *", july, 1, "America/New_York")[0].astimezone(UTC).hour == 13


@pytest.mark.parametrize(
    ("expr", "field_msg"),
    [
        ("", "non-empty"),
        ("* * * *", "4 fields"),
        ("* * * * * * *", "7 fields"),
        ("60 * * * *", "out of range"),
        ("* 24 * * *", "out of range"),
        ("* * 0 * *", "out of range"),
        ("* * * 13 *", "out of range"),
        ("* * * * 8", "out of range"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "backwards"),
        ("1,,2 * * * *", "empty"),
        ("x * * * *", "not a number"),
        ("* * * foo *", "not a number"),
        ("0 0 30 2 *", "never runs"),
        ("0 0 31 4,6 *", "never runs"),
    ],
)
def test_bad_expressions_raise_validation_error(expr: str, field_msg: str) -> None:
    with pytest.raises(ValidationError, match=field_msg) as info:
        parse_cron(expr)
    assert info.value.field == "cron"


def test_unknown_time_zone_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="unknown time zone") as info:
        parse_cron("* * * * *", "Europe/Atlantis")
    assert info.value.field == "tz"


BERLIN = ZoneInfo("Europe/Berlin")


def test_a_skipped_wall_time_runs_shifted_by_the_gap() -> None:
    # 2026-03-29 02:00 -> 03:00 in Berlin: 02:30 does not exist that day
    runs = _runs("30 2 * * *", datetime(2026, 3, 28, 12, tzinfo=BERLIN), 3, "Europe/Berlin")
    assert [d.isoformat() for d in runs] == [
        "2026-03-29T03:30:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    # '*' hours: the missing hour has no runs, the others run as usual
    hourly = _runs("0 * * * *", datetime(2026, 3, 29, 0, 30, tzinfo=BERLIN), 3, "Europe/Berlin")
    assert [d.strftime("%H:%M%z") for d in hourly] == ["01:00+0100", "03:00+0200", "04:00+0200"]


def test_a_repeated_wall_time_runs_once_unless_the_hour_is_star() -> None:
    # 2026-10-25 03:00 -> 02:00 in Berlin: 02:xx happens twice
    daily = _runs("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=BERLIN), 2, "Europe/Berlin")
    assert [d.isoformat() for d in daily] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    start = datetime(2026, 10, 25, 1, 50, tzinfo=BERLIN)
    every = _runs("*/30 * * * *", start, 5, "Europe/Berlin")
    assert [d.strftime("%H:%M%z") for d in every] == [
        "02:00+0200",
        "02:30+0200",
        "02:00+0100",
        "02:30+0100",
        "03:00+0100",
    ]


def _reference(
    match: Callable[[datetime], bool], hour_star: bool, zone: ZoneInfo, lo: datetime, hi: datetime
) -> list[int]:
    """Every run in [lo, hi) by the documented rules, found by brute force over wall minutes."""
    runs: set[int] = set()
    wall = lo.replace(tzinfo=None) - timedelta(hours=4)
    end = hi.replace(tzinfo=None) + timedelta(days=2)
    while wall < end:
        if match(wall):
            a = int(wall.replace(tzinfo=zone, fold=0).timestamp())
            b = int(wall.replace(tzinfo=zone, fold=1).timestamp())
            back = wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None)
            if a == b:
                runs.add(a)
            elif back != wall:  # in a gap: only fixed hours run, shifted forward
                if not hour_star:
                    runs.add(max(a, b))
            elif hour_star:  # repeated: both occurrences
                runs.update((a, b))
            else:
                runs.add(min(a, b))
        wall += timedelta(minutes=1)
    return sorted(r * 1000 for r in runs)


@pytest.mark.parametrize("zone_name", ["Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"])
@pytest.mark.parametrize(
    ("expr", "match", "hour_star"),
    [
        ("*/20 * * * *", lambda w: w.minute % 20 == 0, True),
        ("30 2 * * *", lambda w: (w.hour, w.minute) == (2, 30), False),
        ("0,45 0-3 * * *", lambda w: w.minute in (0, 45) and w.hour <= 3, False),
        ("15 23,0,1 * * *", lambda w: w.minute == 15 and w.hour in (23, 0, 1), False),
        ("*/7 * * * *", lambda w: w.minute % 7 == 0, True),
    ],
)
def test_next_after_agrees_with_brute_force_around_offset_changes(
    zone_name: str, expr: str, match: Callable[[datetime], bool], hour_star: bool
) -> None:
    zone = ZoneInfo(zone_name)
    cron = parse_cron(expr, zone_name)
    # find this zone's offset changes in 2026 and check two days around each
    changes = []
    t = datetime(2026, 1, 1, tzinfo=UTC)
    while t.year == 2026:
        nxt = t + timedelta(hours=6)
        if t.astimezone(zone).utcoffset() != nxt.astimezone(zone).utcoffset():
            changes.append(t)
        t = nxt
    assert changes, f"{zone_name} has no offset change in 2026"
    for change in changes:
        lo, hi = change - timedelta(days=1), change + timedelta(days=1)
        ref = _reference(match, hour_star, zone, lo, hi)
        probe = _ms(lo)
        while probe < _ms(hi):
            want = next(r for r in ref if r > probe)
            assert cron.next_after(probe) == want, (
                f"{expr} in {zone_name} after {datetime.fromtimestamp(probe / 1000, zone)}"
            )
            probe += 7 * 60_000 + 13_000
