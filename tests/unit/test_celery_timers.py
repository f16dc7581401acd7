"""The ``celery`` cron timer and the solar timer fire when Celery's own schedules would.

Property tests: for generated crontabs, intervals and solar events, in zones
with daylight saving, from instants spread over several years, the bridge's
next ten occurrences equal the ten fire times Celery's ``crontab``,
``schedule`` and ``solar`` compute (``bridge.celery.schedules.fire_times`` asks their
``remaining_estimate``, as beat does).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bridge.celery.schedules import celery_cron_text, fire_times, solar_text, timer_text, zoned
from bridge.rules.solar import EVENTS
from bridge.rules.timers import TimerSyntaxError, parse_timer, upcoming

APP = Celery("celery-timers", set_as_current=False)
ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kathmandu",
    "Pacific/Chatham",
)
#: Instants from 2024 to 2031: leap years, and every daylight-saving change between.
INSTANTS = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2031, 1, 1), timezones=st.just(UTC)
)
#: Instants close to the changes, where the rules differ most.
NEAR_CHANGES = st.sampled_from(
    [
        datetime(2026, 3, 28, 23, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 0, 10, tzinfo=UTC),
        datetime(2026, 10, 24, 23, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 0, 40, tzinfo=UTC),
        datetime(2026, 3, 8, 6, 0, tzinfo=UTC),
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
        datetime(2026, 4, 4, 14, 0, tzinfo=UTC),
        datetime(2026, 10, 3, 15, 0, tzinfo=UTC),
    ]
)


def field(values: range, most: int) -> st.SearchStrategy[str]:
    """A crontab field: '*', a step, a range, or a list of values."""
    low, high = values.start, values.stop - 1
    return st.one_of(
        st.just("*"),
        st.integers(2, max(2, most)).map(lambda step: f"*/{step}"),
        st.tuples(st.integers(low, high), st.integers(low, high)).map(
            lambda pair: f"{min(pair)}-{max(pair)}"
        ),
        st.sets(st.integers(low, high), min_size=1, max_size=4).map(
            lambda chosen: ",".join(str(v) for v in sorted(chosen))
        ),
    )


CRONTABS = st.fixed_dictionaries(
    {
        "minute": field(range(60), 30),
        "hour": field(range(24), 12),
        "day_of_month": st.one_of(st.just("*"), st.just("*"), field(range(1, 29), 10)),
        "month_of_year": st.one_of(st.just("*"), st.just("*"), field(range(1, 13), 6)),
        "day_of_week": st.one_of(st.just("*"), field(range(7), 3)),
    }
)


def local(times: list[datetime], zone: str) -> list[str]:
    return [t.astimezone(ZoneInfo(zone)).isoformat() for t in times]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=CRONTABS, zone=st.sampled_from(ZONES), start=st.one_of(INSTANTS, NEAR_CHANGES))
@example(
    spec={
        "minute": "*",
        "hour": "2",
        "day_of_month": "*",
        "month_of_year": "*",
        "day_of_week": "*",
    },
    zone="Pacific/Chatham",
    start=datetime(2026, 4, 4, 14, 0, tzinfo=UTC),
)
def test_celery_cron_fires_when_celerys_crontab_does(
    spec: dict[str, str], zone: str, start: datetime
) -> None:
    value = zoned(crontab(app=APP, **spec), ZoneInfo(zone))
    text = celery_cron_text(value)
    try:
        timer = parse_timer(text, zone)
    except TimerSyntaxError:
        # No day matches every field (31 February): Celery gives up as well.
        with pytest.raises(RuntimeError):
            fire_times(value, start, 10)
        return
    ours = upcoming(timer, start, 10)
    theirs = fire_times(value, start, 10)
    if len(theirs) < 10:
        # Celery's next fire came at or before its last: in an hour the clocks repeat
        # it takes a wall time for its first pass (Pacific/Chatham, 2026-04-04 14:00
        # UTC), and its beat would fire at once, tick after tick. Up to there the two
        # agree; after it, each of ours is a time the crontab names, once.
        assert ours[: len(theirs)] == theirs
        assert ours == sorted(set(ours)) and all(t > start for t in ours)
        assert all(named_by(value, t.astimezone(ZoneInfo(zone))) for t in ours)
        return
    assert local(ours, zone) == local(theirs, zone)


def named_by(value: crontab, wall: datetime) -> bool:
    """Whether the crontab's fields all name this wall time (Celery: Sunday is 0)."""
    return (
        wall.minute in value.minute
        and wall.hour in value.hour
        and wall.day in value.day_of_month
        and wall.month in value.month_of_year
        and wall.isoweekday() % 7 in value.day_of_week
    )


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize(
    "spec",
    [
        {"minute": "30", "hour": "2"},
        {"minute": "30"},
        {"minute": "*/20", "hour": "2"},
        {"minute": "0,30", "hour": "2"},
        {"minute": "15,45", "hour": "1-3"},
        {"minute": "0", "hour": "0", "day_of_month": "13", "day_of_week": "fri"},
    ],
)
@pytest.mark.parametrize("year", [2025, 2026, 2027])
def test_celery_cron_across_every_change_of_a_year(
    spec: dict[str, str], zone: str, year: int
) -> None:
    """A whole year, fire after fire: both changes of the clocks and every day between."""
    value = zoned(crontab(app=APP, **spec), ZoneInfo(zone))
    timer = parse_timer(celery_cron_text(value), zone)
    start = datetime(year, 1, 1, tzinfo=UTC)
    count = 400 if spec.get("day_of_month") else 1000
    assert upcoming(timer, start, count) == fire_times(value, start, count)


def test_celery_cron_days_must_match_every_field() -> None:
    """Friday the 13th, where classic cron reads every 13th and every Friday."""
    timer = parse_timer("CELERY  0 0 13 *  FRI", "UTC")
    assert timer.text == "celery 0 0 13 * fri"
    times = upcoming(timer, datetime(2026, 1, 1, tzinfo=UTC), 3)
    assert [t.date().isoformat() for t in times] == ["2026-02-13", "2026-03-13", "2026-11-13"]
    classic = upcoming(parse_timer("0 0 13 * fri", "UTC"), datetime(2026, 1, 1, tzinfo=UTC), 3)
    assert [t.date().isoformat() for t in classic] == ["2026-01-02", "2026-01-09", "2026-01-13"]


def test_celery_cron_in_a_gap_fires_one_gap_length_later() -> None:
    """02:30 does not exist on 29 March 2026 in Berlin: Celery reads it as 03:30."""
    timer = parse_timer("celery 30 2 * * *", "Europe/Berlin")
    berlin = ZoneInfo("Europe/Berlin")
    times = upcoming(timer, datetime(2026, 3, 27, 12, tzinfo=berlin), 3)
    assert [t.astimezone(berlin).isoformat() for t in times] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


@pytest.mark.parametrize(
    "text",
    ["celery", "celery 0 0 31 2 *", "celery 0 0 30 feb mon", "celery 61 * * * *", "celery @reboot"],
)
def test_celery_cron_refuses_what_never_fires_or_does_not_read(text: str) -> None:
    with pytest.raises(TimerSyntaxError) as caught:
        parse_timer(text, "UTC")
    assert "celery" in caught.value.expected


@settings(max_examples=150, deadline=None)
@given(
    seconds=st.integers(1, 3 * 86_400),
    zone=st.sampled_from(ZONES),
    start=st.one_of(INSTANTS, NEAR_CHANGES),
)
def test_intervals_fire_when_celerys_schedule_does(
    seconds: int, zone: str, start: datetime
) -> None:
    """Anchored at the last run, ``every`` is Celery's schedule: real time, whatever the zone."""
    app = Celery("interval", set_as_current=False)
    app.conf.timezone = zone
    value = schedule(timedelta(seconds=seconds), app=app)
    timer = parse_timer(timer_text(value), zone, anchor=start)
    assert upcoming(timer, start, 10) == fire_times(value, start, 10)


COORDINATES = st.tuples(
    st.decimals(min_value=-89, max_value=89, places=4),
    st.decimals(min_value=-180, max_value=180, places=4),
)


@settings(max_examples=60, deadline=None)
@given(
    event=st.sampled_from(sorted(EVENTS)),
    place=st.one_of(
        COORDINATES,
        # Places where some events skip days: high latitudes, north and south.
        st.sampled_from(
            [(78.2232, 15.6267), (69.6492, 18.9553), (-77.85, 166.6667), (60.17, 24.94)]
        ),
    ),
    start=INSTANTS,
)
def test_solar_timers_fire_when_celerys_solar_does(
    event: str, place: tuple[float, float], start: datetime
) -> None:
    value = solar(event, place[0], place[1], app=APP)
    timer = parse_timer(solar_text(value), "Europe/Berlin")
    assert upcoming(timer, start, 10) == fire_times(value, start, 10)


def test_solar_timer_text_is_normalised() -> None:
    timer = parse_timer("SOLAR  Sunset 52.520000, 13.40500", "UTC")
    assert timer.text == "solar sunset 52.52 13.405"
    first = timer.next_after(datetime(2026, 6, 21, tzinfo=UTC))
    assert first is not None
    assert first.isoformat().startswith("2026-06-21T19:3")  # Berlin's longest day


@pytest.mark.parametrize(
    "text",
    [
        "solar",
        "solar sunrise 1",
        "solar moonrise 1 2",
        "solar sunrise 91 0",
        "solar sunrise 0 -181",
        "solar sunrise north 0",
        "solar sunrise nan 0",
    ],
)
def test_solar_timer_refusals_say_what_is_expected(text: str) -> None:
    with pytest.raises(TimerSyntaxError) as caught:
        parse_timer(text, "UTC")
    assert "solar <event> <latitude> <longitude>" in caught.value.expected


def test_a_solar_event_that_never_happens_has_no_occurrence() -> None:
    """At the pole the sun stays up for months: no astronomical dusk in June."""
    timer = parse_timer("solar dusk_astronomical 90 0", "UTC")
    june = datetime(2026, 6, 1, tzinfo=UTC)
    following = timer.next_after(june)
    assert following is None or following > june + timedelta(days=60)
