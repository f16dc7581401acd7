"""Tests of bridge.timers: parsing, refusals, occurrence maths and daylight saving.

The example tests pin exact instants; the property tests compare the timers
with an independent oracle built here from croniter's naive (zone-free)
iteration and a minute-by-minute scan of real time.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.rules.timers import (
    CronTimer,
    IntervalTimer,
    OneShotTimer,
    Timer,
    TimerSyntaxError,
    UnknownTimezone,
    format_duration,
    load_zone,
    parse_duration,
    parse_timer,
    upcoming,
)

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)

ZONES = [
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "America/Sao_Paulo",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "America/Santiago",
]
DST_ZONES = [
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
]


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def cron(text: str, zone: str | ZoneInfo = "UTC") -> CronTimer:
    timer = parse_timer(text, zone)
    assert isinstance(timer, CronTimer)
    return timer


def local(instant: datetime, zone: str) -> str:
    """The wall time and offset an instant shows in ``zone``, for readable asserts."""
    return instant.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M%z")


# ------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("every 30s", "every 30s"),
        ("every 5m", "every 5m"),
        ("every 2h", "every 2h"),
        ("every 1d", "every 1d"),
        ("every 1h30m", "every 1h30m"),
        ("  EVERY   90m ", "every 1h30m"),
        ("every 1d2h3m4s", "every 1d2h3m4s"),
    ],
)
def test_interval_text_is_normalised(text: str, normalised: str) -> None:
    timer = parse_timer(text, anchor=ANCHOR)
    assert isinstance(timer, IntervalTimer)
    assert timer.text == normalised
    assert not timer.is_one_shot


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("0 9 * * MON-FRI", "0 9 * * mon-fri"),
        ("  */15   *  * * * ", "*/15 * * * *"),
        ("0 0 1 jan,Jul *", "0 0 1 jan,jul *"),
        ("@hourly", "@hourly"),
        ("@DAILY", "@daily"),
        ("@midnight", "@daily"),
        ("@weekly", "@weekly"),
        ("@monthly", "@monthly"),
        ("@yearly", "@yearly"),
        ("@annually", "@yearly"),
    ],
)
def test_cron_text_is_normalised(text: str, normalised: str) -> None:
    timer = cron(text)
    assert timer.text == normalised
    assert not timer.is_one_shot


@pytest.mark.parametrize(
    ("text", "fixed"),
    [
        ("30 1 * * *", True),
        ("0 9 * * mon-fri", True),
        ("0,30 2 * * *", True),
        ("@daily", True),
        ("@weekly", True),
        ("*/15 * * * *", False),
        ("0 * * * *", False),
        ("@hourly", False),
        ("30 */2 * * *", False),
        ("* 3 * * *", False),
    ],
)
def test_fixed_time_means_no_star_in_minute_or_hour(text: str, fixed: bool) -> None:
    assert cron(text).fields.fixed_time is fixed


@pytest.mark.parametrize(
    ("text", "zone", "instant"),
    [
        ("at 2026-12-01T09:00:00+01:00", "UTC", utc(2026, 12, 1, 8)),
        ("at 2026-12-01T08:00:00Z", "Asia/Tokyo", utc(2026, 12, 1, 8)),
        ("at 2026-12-01T09:00", "Europe/Berlin", utc(2026, 12, 1, 8)),
        ("at 2026-12-01 09:00", "America/New_York", utc(2026, 12, 1, 14)),
        # Skipped wall time: the first instant after the gap (03:00 EDT).
        ("at 2026-03-08T02:30", "America/New_York", utc(2026, 3, 8, 7)),
        # Repeated wall time: the first pass (01:30 EDT).
        ("at 2026-11-01T01:30", "America/New_York", utc(2026, 11, 1, 5, 30)),
    ],
)
def test_one_shot_is_one_instant(text: str, zone: str, instant: datetime) -> None:
    timer = parse_timer(text, zone)
    assert isinstance(timer, OneShotTimer)
    assert timer.is_one_shot
    assert timer.text == f"at {instant.isoformat()}"
    assert timer.next_after(instant - MINUTE) == instant
    assert timer.next_after(instant) is None
    assert upcoming(timer, instant - HOUR, 5) == [instant]


def test_zone_is_accepted_by_name_or_object() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    assert cron("@daily", "Europe/Berlin").zone == berlin
    assert cron("@daily", berlin).zone is berlin
    assert load_zone("UTC") == ZoneInfo("UTC")


def test_interval_needs_an_aware_anchor() -> None:
    with pytest.raises(ValueError, match="anchor"):
        parse_timer("every 5m")
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_timer("every 5m", anchor=datetime(2026, 1, 1))


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        cron("@daily").next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        cron("@daily").latest_at_or_before(datetime(2026, 1, 1))


# ----------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "60 * * * *",
        "* 24 * * *",
        "0 0 0 * *",
        "0 0 32 * *",
        "0 0 * 0 *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "* * * * * *",
        "0 0 1 1 * 2026",
        "* * * *",
        "@reboot",
        "@every",
        "@every 5m",
        "@daily extra",
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 * * mon#2",
        "0 0 * * 5L",
        "H * * * *",
        "0 0 ? * mon",
        "5/15 * * * *",
        "*/0 * * * *",
        "*/61 * * * *",
        "10-5 * * * *",
        "0 0 * * fri-mon",
        "1,,2 * * * *",
        "1, * * * *",
        "0 0 * foo *",
        "0 0 30 2 *",
        "0 0 31 apr,jun *",
        "-1 * * * *",
        "½ * * * *",
        "every",
        "every 0s",
        "every 0h0m",
        "every 5x",
        "every 5",
        "every m",
        "every 1m1h",
        "every 1h1h",
        "every -5m",
        "every 1.5h",
        "every 1h 30m",
        "every 1000000000d",
        "at",
        "at not-a-date",
        "at 2026-13-01T00:00",
        "at 2026-12-01T09:00 tomorrow",
    ],
)
def test_unreadable_timer_is_refused(text: str) -> None:
    with pytest.raises(TimerSyntaxError) as caught:
        parse_timer(text, anchor=ANCHOR)
    assert isinstance(caught.value, ValueError)
    assert caught.value.expected
    assert caught.value.text == text


def test_refusal_says_what_is_expected() -> None:
    with pytest.raises(TimerSyntaxError) as caught:
        parse_timer("60 * * * *")
    assert "minute value 60 is outside 0-59" in str(caught.value)
    assert "'every <n><s|m|h|d>...'" in caught.value.expected


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "", "utc/../UTC", "/etc/localtime", "../zoneinfo/UTC", "Europe/"]
)
def test_unknown_zone_is_refused(name: str) -> None:
    with pytest.raises(UnknownTimezone) as caught:
        parse_timer("@daily", name)
    assert isinstance(caught.value, ValueError)
    assert caught.value.name == name
    with pytest.raises(UnknownTimezone):
        load_zone(name)


# ---------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1d2h3m4s", 93784),
        ("90m", 5400),
        ("1h0m", 3600),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (30, "30s"),
        (300, "5m"),
        (5400, "1h30m"),
        (86400, "1d"),
        (93784, "1d2h3m4s"),
        (90061, "1d1h1m1s"),
    ],
)
def test_format_duration(seconds: int, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text


@pytest.mark.parametrize(
    "delta",
    [timedelta(0), timedelta(seconds=-5), timedelta(seconds=1.5), timedelta(microseconds=1)],
)
def test_format_duration_refuses_what_has_no_text(delta: timedelta) -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        format_duration(delta)


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=10**9))
def test_duration_round_trips(seconds: int) -> None:
    delta = timedelta(seconds=seconds)
    text = format_duration(delta)
    assert parse_duration(text) == delta
    assert format_duration(parse_duration(text)) == text


# ------------------------------------------------------------------------ intervals


def test_interval_grid_from_anchor() -> None:
    anchor = utc(2026, 3, 1, 9, 0)
    timer = parse_timer("every 1h30m", anchor=anchor)
    assert upcoming(timer, utc(2026, 3, 1, 9, 0), 3) == [
        utc(2026, 3, 1, 10, 30),
        utc(2026, 3, 1, 12, 0),
        utc(2026, 3, 1, 13, 30),
    ]
    # The grid extends before the anchor too.
    assert timer.next_after(utc(2026, 3, 1, 6, 1)) == utc(2026, 3, 1, 7, 30)
    assert timer.latest_at_or_before(utc(2026, 3, 1, 9, 0)) == anchor
    assert timer.latest_at_or_before(utc(2026, 3, 1, 8, 59)) == utc(2026, 3, 1, 7, 30)


def test_interval_is_real_time_across_daylight_saving() -> None:
    # Europe/Berlin springs forward on 2026-03-29: 'every 1d' stays 24 real hours.
    timer = parse_timer("every 1d", "Europe/Berlin", anchor=utc(2026, 3, 27, 8))
    assert upcoming(timer, utc(2026, 3, 27, 8), 3) == [
        utc(2026, 3, 28, 8),
        utc(2026, 3, 29, 8),
        utc(2026, 3, 30, 8),
    ]
    assert local(utc(2026, 3, 30, 8), "Europe/Berlin") == "2026-03-30 10:00+0200"


def test_interval_latest_after_a_long_gap() -> None:
    timer = parse_timer("every 1s", anchor=utc(2026, 1, 1, 0, 0, 0, 250_000))
    at = utc(2026, 2, 1, 12, 0, 0)
    assert timer.latest_at_or_before(at) == utc(2026, 2, 1, 11, 59, 59, 250_000)
    assert timer.next_after(at) == utc(2026, 2, 1, 12, 0, 0, 250_000)


def test_interval_accepts_anchor_in_any_zone() -> None:
    anchor = datetime(2026, 1, 1, 10, tzinfo=ZoneInfo("Europe/Berlin"))
    timer = parse_timer("every 2h", anchor=anchor)
    assert timer.next_after(utc(2026, 1, 1, 9)) == utc(2026, 1, 1, 11)
    assert timer.next_after(utc(2026, 1, 1, 9)).tzinfo is UTC  # type: ignore[union-attr]


# ----------------------------------------------------------------- latest / one-shot


def test_cron_latest_at_or_before() -> None:
    timer = cron("0 9 * * mon-fri", "Europe/Berlin")
    # Sunday 2026-03-08 noon: the latest run was Friday 09:00 CET.
    assert timer.latest_at_or_before(utc(2026, 3, 8, 11)) == utc(2026, 3, 6, 8)
    assert timer.latest_at_or_before(utc(2026, 3, 6, 8)) == utc(2026, 3, 6, 8)
    assert timer.latest_at_or_before(utc(2026, 3, 6, 7, 59, 59)) == utc(2026, 3, 5, 8)


def test_cron_latest_after_a_long_gap() -> None:
    assert cron("* * * * *").latest_at_or_before(utc(2026, 7, 1, 12, 0, 30)) == utc(
        2026, 7, 1, 12, 0
    )
    leap_day = cron("0 12 29 feb *", "Europe/Berlin")
    assert leap_day.latest_at_or_before(utc(2035, 1, 1)) == utc(2032, 2, 29, 11)
    assert leap_day.next_after(utc(2026, 1, 1)) == utc(2028, 2, 29, 11)


def test_one_shot_latest_at_or_before() -> None:
    timer = parse_timer("at 2026-12-01T08:00:00+00:00")
    assert timer.latest_at_or_before(utc(2026, 12, 1, 7, 59)) is None
    assert timer.latest_at_or_before(utc(2026, 12, 1, 8)) == utc(2026, 12, 1, 8)
    assert timer.latest_at_or_before(utc(2027, 1, 1)) == utc(2026, 12, 1, 8)


def test_upcoming_counts() -> None:
    timer = cron("@hourly")
    assert upcoming(timer, utc(2026, 1, 1), 0) == []
    assert len(upcoming(timer, utc(2026, 1, 1), 48)) == 48
    with pytest.raises(ValueError, match="negative"):
        upcoming(timer, utc(2026, 1, 1), -1)


# ----------------------------------------------------------------------- day fields


def test_restricted_day_of_month_and_weekday_match_either() -> None:
    timer = cron("0 0 13 * mon")
    days = [o.day for o in upcoming(timer, utc(2026, 3, 1), 6)]
    assert days == [2, 9, 13, 16, 23, 30]


def test_star_prefixed_day_field_makes_both_required() -> None:
    # Vixie cron: a day field starting with '*' is 'unrestricted', so the
    # fields combine with AND: days 1, 11, 21, 31 that are Mondays.
    timer = cron("0 0 */10 * mon")
    assert [o.date() for o in upcoming(timer, utc(2026, 1, 1), 3)] == [
        date(2026, 5, 11),
        date(2026, 6, 1),
        date(2026, 8, 31),
    ]


def test_day_of_week_seven_is_sunday() -> None:
    assert cron("0 0 * * 7").next_after(utc(2026, 3, 2)) == utc(2026, 3, 8)
    assert cron("0 0 * * 5-7").next_after(utc(2026, 3, 2)) == utc(2026, 3, 6)


# ------------------------------------------------------------------ daylight saving


@pytest.mark.parametrize(
    ("zone", "after", "expected"),
    [
        # Berlin springs forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC).
        (
            "Europe/Berlin",
            utc(2026, 3, 27),
            [
                "2026-03-27 02:30+0100",
                "2026-03-28 02:30+0100",
                "2026-03-29 03:00+0200",
                "2026-03-30 02:30+0200",
            ],
        ),
        # New York springs forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC).
        (
            "America/New_York",
            utc(2026, 3, 7),
            ["2026-03-07 02:30-0500", "2026-03-08 03:00-0400", "2026-03-09 02:30-0400"],
        ),
        # Berlin falls back 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 runs once.
        (
            "Europe/Berlin",
            utc(2026, 10, 24),
            ["2026-10-24 02:30+0200", "2026-10-25 02:30+0200", "2026-10-26 02:30+0100"],
        ),
    ],
)
def test_fixed_time_job_at_half_past_two(zone: str, after: datetime, expected: list[str]) -> None:
    timer = cron("30 2 * * *", zone)
    assert [local(o, zone) for o in upcoming(timer, after, len(expected))] == expected


def test_fixed_time_job_on_fall_back_runs_on_first_pass_only() -> None:
    # New York falls back 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice.
    timer = cron("30 1 * * *", "America/New_York")
    assert upcoming(timer, utc(2026, 10, 31), 3) == [
        utc(2026, 10, 31, 5, 30),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 2, 6, 30),
    ]
    # Asked from inside the second pass, the first pass is already over.
    assert timer.next_after(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 2, 6, 30)
    assert timer.latest_at_or_before(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 5, 30)


def test_fixed_times_inside_one_gap_collapse_into_one_run() -> None:
    timer = cron("0,30 2 * * *", "Europe/Berlin")
    assert [local(o, "Europe/Berlin") for o in upcoming(timer, utc(2026, 3, 28, 12), 3)] == [
        "2026-03-29 03:00+0200",
        "2026-03-30 02:00+0200",
        "2026-03-30 02:30+0200",
    ]
    assert timer.latest_at_or_before(utc(2026, 3, 29, 12)) == utc(2026, 3, 29, 1)


def test_wildcard_job_runs_in_both_passes_of_a_repeated_hour() -> None:
    timer = cron("*/15 * * * *", "America/New_York")
    occurrences = upcoming(timer, utc(2026, 11, 1, 4, 45), 9)
    assert [local(o, "America/New_York") for o in occurrences] == [
        "2026-11-01 01:00-0400",
        "2026-11-01 01:15-0400",
        "2026-11-01 01:30-0400",
        "2026-11-01 01:45-0400",
        "2026-11-01 01:00-0500",
        "2026-11-01 01:15-0500",
        "2026-11-01 01:30-0500",
        "2026-11-01 01:45-0500",
        "2026-11-01 02:00-0500",
    ]
    assert all(b - a == timedelta(minutes=15) for a, b in pairwise(occurrences))
    assert timer.latest_at_or_before(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 1, 6, 0)
    assert timer.latest_at_or_before(utc(2026, 11, 1, 5, 59)) == utc(2026, 11, 1, 5, 45)


def test_wildcard_job_skips_a_gap() -> None:
    timer = cron("*/15 * * * *", "Europe/Berlin")
    assert [local(o, "Europe/Berlin") for o in upcoming(timer, utc(2026, 3, 29, 0, 30), 3)] == [
        "2026-03-29 01:45+0100",
        "2026-03-29 03:00+0200",
        "2026-03-29 03:15+0200",
    ]
    assert cron("*/15 2 * * *", "Europe/Berlin").next_after(utc(2026, 3, 28, 12)) == utc(
        2026, 3, 30, 0
    )


def test_wildcard_job_in_berlin_fall_back() -> None:
    timer = cron("0 * * * *", "Europe/Berlin")
    assert [local(o, "Europe/Berlin") for o in upcoming(timer, utc(2026, 10, 24, 22, 30), 4)] == [
        "2026-10-25 01:00+0200",
        "2026-10-25 02:00+0200",
        "2026-10-25 02:00+0100",
        "2026-10-25 03:00+0100",
    ]


def test_half_hour_shift_of_lord_howe() -> None:
    # Lord Howe falls back 2026-04-05 02:00 +11 -> 01:30 +1030.
    timer = cron("*/20 * * * *", "Australia/Lord_Howe")
    assert [local(o, "Australia/Lord_Howe") for o in upcoming(timer, utc(2026, 4, 4, 14), 5)] == [
        "2026-04-05 01:20+1100",
        "2026-04-05 01:40+1100",
        "2026-04-05 01:40+1030",
        "2026-04-05 02:00+1030",
        "2026-04-05 02:20+1030",
    ]
    fixed = cron("45 1 * * *", "Australia/Lord_Howe")
    assert upcoming(fixed, utc(2026, 4, 4), 2) == [utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)]


def test_midnight_gap_of_santiago() -> None:
    # Santiago springs forward 2026-09-06 00:00 -04 -> 01:00 -03: midnight is skipped.
    timer = cron("@daily", "America/Santiago")
    assert [local(o, "America/Santiago") for o in upcoming(timer, utc(2026, 9, 5), 3)] == [
        "2026-09-05 00:00-0400",
        "2026-09-06 01:00-0300",
        "2026-09-07 00:00-0300",
    ]


def test_odd_offset_of_kathmandu() -> None:
    timer = cron("0 9 * * *", "Asia/Kathmandu")
    assert timer.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 3, 15)


# -------------------------------------------------------------------- the oracle


@functools.cache
def transitions(zone: str, year: int) -> tuple[datetime, ...]:
    """The instants in ``year`` at which ``zone`` changes its UTC offset."""
    tz = ZoneInfo(zone)
    found = []
    day = utc(year, 1, 1)
    while day.year == year:
        low, high = day, day + timedelta(days=1)
        if low.astimezone(tz).utcoffset() != high.astimezone(tz).utcoffset():
            while high - low > MINUTE:
                middle = low + MINUTE * ((high - low) // MINUTE // 2)
                if middle.astimezone(tz).utcoffset() == high.astimezone(tz).utcoffset():
                    high = middle
                else:
                    low = middle
            found.append(high)
        day += timedelta(days=1)
    return tuple(found)


def showing(zone: ZoneInfo, wall: datetime) -> list[datetime]:
    """Every instant at which the clocks of ``zone`` show ``wall``."""
    readings = {wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)}
    return sorted(r for r in readings if r.astimezone(zone).replace(tzinfo=None) == wall)


def first_instant_past(zone: ZoneInfo, wall: datetime) -> datetime:
    """The first whole-minute instant whose wall time is later than the skipped ``wall``."""
    instant = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    while instant.astimezone(zone).replace(tzinfo=None) <= wall:
        instant += MINUTE
    return instant


def oracle(text: str, zone: str, start: datetime, end: datetime, fixed: bool) -> list[datetime]:
    """Occurrences in (start, end] from croniter's naive walk and the DST rules."""
    tz = ZoneInfo(zone)
    wall = start.astimezone(tz).replace(tzinfo=None) - 3 * HOUR
    last_wall = end.astimezone(tz).replace(tzinfo=None) + 3 * HOUR
    walk = croniter(text, wall)
    instants: set[datetime] = set()
    while (wall := walk.get_next(datetime)) <= last_wall:
        shown = showing(tz, wall)
        if fixed:
            instants.add(shown[0] if shown else first_instant_past(tz, wall))
        else:
            instants.update(shown)
    return sorted(i for i in instants if start < i <= end)


def occurrences_until(timer: Timer, start: datetime, end: datetime) -> list[datetime]:
    found = []
    cursor: datetime | None = timer.next_after(start)
    while cursor is not None and cursor <= end:
        found.append(cursor)
        cursor = timer.next_after(cursor)
    return found


# ------------------------------------------------------------------ property tests

zones = st.sampled_from(ZONES)
instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2035, 12, 31), timezones=st.just(UTC)
)


@st.composite
def near_transitions(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone with daylight saving and an instant within a few hours of one of its changes."""
    zone = draw(st.sampled_from(DST_ZONES))
    changes = transitions(zone, draw(st.integers(min_value=2026, max_value=2035)))
    change = draw(st.sampled_from(changes))
    shift = draw(st.integers(min_value=-4 * 3600, max_value=3600))
    return zone, change + timedelta(seconds=shift)


def minute_field(draw: st.DrawFn) -> str:
    return draw(
        st.sampled_from(["*", "*/5", "*/15", "*/7", "0", "30", "0,30", "10-20", "15-45/10", "59"])
    )


def hour_field(draw: st.DrawFn) -> str:
    return draw(
        st.sampled_from(["*", "*/2", "*/3", "0", "1", "2", "3", "1,2", "0-3", "1-3/2", "23"])
    )


# Day fields stay clear of the spellings on which croniter reads the classic
# day rule differently ('*/n' and full ranges), so that it can be the oracle.
@st.composite
def cron_texts(draw: st.DrawFn) -> str:
    days = draw(st.sampled_from(["*", "*", "*", "1", "1,15", "10-20", "5-25/5", "28"]))
    months = draw(st.sampled_from(["*", "*", "3,4,9,10,11", "jan-jun", "oct"]))
    weekdays = draw(st.sampled_from(["*", "*", "*", "mon-fri", "sun", "0,6", "7", "tue-thu"]))
    return f"{minute_field(draw)} {hour_field(draw)} {days} {months} {weekdays}"


@settings(max_examples=60, deadline=None)
@given(cron_texts(), near_transitions())
def test_cron_matches_the_oracle_around_transitions(text: str, place: tuple[str, datetime]) -> None:
    zone, start = place
    end = start + 8 * HOUR
    timer = cron(text, zone)
    assert occurrences_until(timer, start, end) == oracle(
        text, zone, start, end, timer.fields.fixed_time
    )


@settings(max_examples=60, deadline=None)
@given(cron_texts(), zones, instants)
def test_cron_occurrences_strictly_increase(text: str, zone: str, start: datetime) -> None:
    found = upcoming(cron(text, zone), start, 40)
    assert found
    assert all(o.tzinfo is UTC for o in found)
    assert start < found[0]
    assert all(a < b for a, b in pairwise(found))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=3 * 86400).map(lambda s: timedelta(seconds=s)),
    instants,
    instants,
)
def test_interval_occurrences_lie_on_the_anchor_grid(
    interval: timedelta, anchor: datetime, start: datetime
) -> None:
    timer = parse_timer(f"every {format_duration(interval)}", "Europe/Berlin", anchor=anchor)
    found = upcoming(timer, start, 20)
    assert len(found) == 20
    assert found[0] - interval <= start < found[0]
    assert all((o - anchor) % interval == timedelta(0) for o in found)
    assert all(b - a == interval for a, b in pairwise(found))
    latest = timer.latest_at_or_before(start)
    assert latest is not None
    assert latest <= start < latest + interval
    assert (latest - anchor) % interval == timedelta(0)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=23),
    zones,
    st.integers(min_value=2026, max_value=2034),
)
def test_fixed_time_daily_job_runs_once_every_local_day(
    minute: int, hour: int, zone: str, year: int
) -> None:
    tz = ZoneInfo(zone)
    first_day = date(year, 1, 1)
    start = datetime.combine(first_day, datetime.min.time(), tz).astimezone(UTC)
    found = upcoming(cron(f"{minute} {hour} * * *", zone), start - MINUTE, 400)
    days = [o.astimezone(tz).date() for o in found]
    assert days == [first_day + timedelta(days=n) for n in range(400)]
    for occurrence, day in zip(found, days, strict=True):
        wall = datetime(day.year, day.month, day.day, hour, minute)
        shown = occurrence.astimezone(tz)
        if showing(tz, wall):
            assert shown.replace(tzinfo=None) == wall
            assert shown.fold == 0
        else:
            # The wall time was skipped: the run is at the jump itself.
            assert occurrence in transitions(zone, day.year)
            assert shown.replace(tzinfo=None) > wall


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60]), near_transitions())
def test_wildcard_job_keeps_real_time_spacing(step: int, place: tuple[str, datetime]) -> None:
    """``*/N`` runs at every instant whose wall minute is a multiple of N.

    Consecutive runs are exactly N minutes apart whenever the UTC offset
    changes between them by a multiple of N minutes: not at all, or by a whole
    hour, which is every change of every zone here except Lord Howe's half
    hour. In any case no instant between two runs shows a matching wall time:
    skipped wall times are simply absent and repeated ones run twice.
    """
    zone, start = place
    tz = ZoneInfo(zone)
    found = upcoming(cron(f"*/{step} * * * *", zone), start, 8 * 60 // step)
    for a, b in pairwise(found):
        shift = b.astimezone(tz).utcoffset() - a.astimezone(tz).utcoffset()  # type: ignore[operator]
        if shift % timedelta(minutes=step) == timedelta(0):
            assert b - a == timedelta(minutes=step)
        between = a + MINUTE
        while between < b:
            assert between.astimezone(tz).minute % step != 0
            between += MINUTE
    assert all(o.astimezone(tz).minute % step == 0 for o in found)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=59), near_transitions())
def test_hourly_job_keeps_real_time_spacing(minute: int, place: tuple[str, datetime]) -> None:
    """``M * * * *`` is an hour of real time apart wherever the zone shifts by whole hours."""
    zone, start = place
    tz = ZoneInfo(zone)
    found = upcoming(cron(f"{minute} * * * *", zone), start, 10)
    assert all(o.astimezone(tz).minute == minute for o in found)
    if zone != "Australia/Lord_Howe":
        assert all(b - a == HOUR for a, b in pairwise(found))


@settings(max_examples=60, deadline=None)
@given(cron_texts(), st.one_of(near_transitions(), st.tuples(zones, instants)))
def test_latest_at_or_before_agrees_with_stepping_forward(
    text: str, place: tuple[str, datetime]
) -> None:
    zone, at = place
    timer = cron(text, zone)
    window_start = at - timedelta(days=1)
    stepped = occurrences_until(timer, window_start, at)
    latest = timer.latest_at_or_before(at)
    if stepped:
        assert latest == stepped[-1]
    else:
        assert latest is None or latest <= window_start
    if latest is not None:
        following = timer.next_after(latest)
        assert following is None or following > at
